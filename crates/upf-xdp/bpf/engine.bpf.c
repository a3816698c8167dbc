/* The XDP engine (issue #27): the common case of a session, run in the kernel as
 * upf_dataplane::Pipeline runs it. Whatever this program does not claim is punted
 * unchanged (counted): tail-called into upf-io's AF_XDP steering program of the arriving
 * interface (`punt_to`), so it goes where it would go without the engine; XDP_PASS when there
 * is none. Forwarded packets leave by the DEVMAP `egress` (XDP_TX on the arriving interface)
 * with Ethernet addresses from bpf_fib_lookup; a packet the FIB gives no next hop on its port
 * is punted unchanged, counted by the FIB's answer. The adaptor (src/compile.rs) decides which
 * sessions may be here and fills the maps; src/lib.rs says what is claimed.
 *
 * Uplink: Ethernet + IPv4 (no options, checksum right, not a fragment) or IPv6 (no extension
 * headers; run as an IPv4 one past its first 20 octets) + UDP to port 2152 at our N3 address
 * + a G-PDU without options, or with exactly one one-word PDU Session Container
 * (its QFI read), lengths consistent; the inner packet IPv4 without options, not a later
 * fragment, at least 24 octets (any protocol). Looked up by TEID; the PDRs of that TEID in precedence order (QFI, UE source
 * address); FAR drop, or forward to N6 with the outer headers stripped (inner TTL decremented).
 * Downlink: Ethernet + the same inner form to a UE address; its PDRs in order (UE destination
 * address); FAR drop, or forward into the GTP-U/UDP/IPv4 or IPv6 tunnel (inner TTL decremented; PSC
 * with the QERs' QFI and RQI when they have one). QER gates and MBRs; URR volume and packet counts, volume quotas;
 * volume thresholds and quotas reached announced on the `crossings` ring buffer.
 * IPv6 inner packets (no extension header) are run the same way by `xdp_engine6`, which
 * `xdp_engine` tail-calls for them: downlink by the /64 of the destination, SDF filters
 * from `shapes6`. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define GTPU_PORT 2152
#define MAX_PDRS 4
#define MAX_PDR_URRS 2
#define MAX_SDF 4
#define MAX_ROUTES 4 /* framed routes of one PDR */
#define URR_SLOTS 4
#define MAX_PDR_MBRS 4 /* MBR buckets one PDR draws from */
#define QOS_BUCKETS 8  /* MBR buckets of one session (a QER's, one a direction) */

/* What a matched PDR's FAR does (the adaptor compiles it). */
#define ACT_DROP 0	/* far_drop: no FAR, or no FORW */
#define ACT_NO_TARGET 1 /* no_forwarding_target: FORW without a target (Access, no tunnel) */
#define ACT_N6 2	/* strip GTP-U, forward the inner packet to N6 */
#define ACT_ENCAP 3	/* forward into a GTP-U/UDP/IPv4 tunnel on N3 (N9 shares it) */
#define ACT_ENCAP6 4	/* ... a GTP-U/UDP/IPv6 one (its peer in `peers6`) */

#define PDR_UE 1	 /* match the UE address */
#define PDR_UE_DST 2	 /* ... as the packet's destination (else its source) */
#define PDR_GATE_SHUT 4	 /* a QER's gate is closed in the PDR's direction */
#define PDR_PSC 8	 /* the tunnel header has a PDU Session Container (psc_octet) */
#define PDR_QUOTA 16	 /* a URR of the PDR has a volume quota or a reported volume threshold */
#define PDR_NEVER 32	 /* under this key the PDR matches nothing (another UE address's) */
#define PDR_TO_CORE 64	 /* ACT_ENCAP: the tunnel goes to the core side (N9): UL container */
#define PDR_ON_N9 128	 /* ACT_ENCAP: the tunnel leaves from our N9 address */

/* A PDR's UE IP by version (`flags6`): PDR_UE with no IPv4 address matches no IPv4 packet;
 * with no IPv6 prefix, no IPv6 packet; with one, an IPv6 packet's UE-side address must be
 * in the session's /64 (`ue6`). */
#define P6_NO_V4 1
#define P6_NO_V6 2

/* Counter indices of `stats`; the drops in the order of src/lib.rs's `Reason`. */
#define R_NO_MATCHING_PDR 0
#define R_FAR_DROP 1
#define R_NO_FORWARDING_TARGET 2
#define R_GATE_CLOSED 3
#define R_TTL_EXPIRED 4
#define R_ENCAP_FAILED 5
#define R_MBR_EXCEEDED 6
#define R_QUOTA_EXHAUSTED 7
#define R_ACL_DENIED 8
#define S_PUNTED 9
#define S_FORWARDED 10
/* Punts for want of a next hop: S_FIB - 1 + BPF_FIB_LKUP_RET_* (1..9), then the port's
 * interface not attached or the route leaving by another one, then the lookup's error. In the
 * order of src/lib.rs's `Unrouted`. */
#define S_FIB 11
#define S_OTHER_INTERFACE (S_FIB + 9)
#define S_FIB_ERROR (S_FIB + 10)
/* A crossing not put on the ring buffer (full): user space finds it in `struct quota`. */
#define S_CROSSINGS_LOST (S_FIB + 11)
#define N_STATS (S_FIB + 12)

/* The engine's ports: index of `punt_to`, `egress`, `egress_ifindex`. */
#define PORT_N3 0
#define PORT_N6 1
#define N_PORTS 2
#define MAX_INTERFACES 16
#define AF_INET 2
#define AF_INET6 10

/* Set at load: our N3 address (as in a header) and the TTL of the outer headers we write. */
const volatile __u32 n3_addr = 0;
/* Our N9 address (N9 shares N3's interface): the source of tunnels on N9. */
const volatile __u32 n9_addr = 0;
const volatile __u32 outer_ttl = 64;
/* Our N3 and N9 IPv6 addresses (as in a header), when `has_n3_addr6` (N3's) and the adaptor
 * compiles tunnels from N9's (it has one): G-PDUs in IPv6 are taken at N3's, IPv6 tunnels
 * leave from them. */
const volatile __u32 has_n3_addr6 = 0;
const volatile __u32 n3_addr6[4] = {};
const volatile __u32 n9_addr6[4] = {};
/* Set for BPF_PROG_TEST_RUN, which cannot redirect: every forwarded packet gets the PDR's
 * fixed Ethernet addresses (`eth`) and XDP_TX, no FIB lookup. */
const volatile __u32 fixed_hops = 0;

/* An SDF filter (TS 29.244 §8.2.5) as upf_rules::SdfFilter::matches decides it for an IPv4
 * packet, with the PDR's UE address resolved: the UE's side and the remote side, each
 * an address (net/mask; SDF_*_NONE: matches no IPv4 address; negated) and a port range. */
#define SDF_NEVER 1	/* deny or flow label: matches no IPv4 packet */
#define SDF_PROTO 2	/* the protocol must be `proto` */
#define SDF_UE_NONE 4
#define SDF_UE_NEG 8
#define SDF_RE_NONE 16
#define SDF_RE_NEG 32
#define SDF_SPI 64	/* the packet must be ESP with this `spi` */
#define SDF_UE_ASSIGNED 128 /* the UE side's address is the session's UE address (/32) */

struct sdf {
	__u32 ue_net, ue_mask; /* as in a header */
	__u32 re_net, re_mask;
	__u16 ue_lo, ue_hi, re_lo, re_hi;
	__u8 flags;
	__u8 proto;
	__u8 tos, tos_mask;
	__u32 spi; /* as in a header */
};

/* A PDR as sessions of one policy share it (in a `shape`): what is each session's own (its UE
 * address, its tunnels' far ends) is in its `struct session`. */
struct pdr {
	__u64 qfis; /* bit q: QFI q matches; 0: any */
	__u8 n_routes;
	__u8 flags6; /* P6_* */
	__u8 unused[10];
	__u8 flags;
	__u8 action;
	__u8 tos; /* ACT_ENCAP: outer DSCP << 2 (Transport Level Marking) */
	__u8 psc_octet;
	__u8 n_urrs;
	__u8 uplink; /* the PDR's packets come from the UE: gates and URRs count uplink */
	__u8 urr[MAX_PDR_URRS]; /* indices in the session's URR slots */
	__u8 eth[12];		/* egress Ethernet: destination, source */
	struct sdf sdf[MAX_SDF];
	__u8 n_sdf; /* 0: no SDF filter (any packet) */
	__u8 n_mbrs;
	__u8 mbr[MAX_PDR_MBRS]; /* indices in the session's `struct qos` buckets */
	/* PDR_UE: the Framed Routes whose addresses are the UE's too (net/mask as in a
	 * header). */
	struct {
		__u32 net, mask;
	} routes[MAX_ROUTES];
};

/* The PDRs of a key (a TEID, a UE address) in precedence order, shared by the sessions of
 * one policy (interned by the adaptor): few, so they stay in cache however many sessions. */
struct shape {
	__u32 n_pdrs;
	__u32 pad;
	struct pdr pdrs[MAX_PDRS];
};

/* A session under one of its keys: 48 octets of its own, the rest in its shape. */
struct session {
	__u32 slot;  /* its URR counters are at slot * URR_SLOTS, its `struct qos` at slot */
	__u32 shape; /* index in `shapes` */
	__u32 ue;    /* its UE address (PDR_UE, SDF_UE_ASSIGNED), as in a header */
	__u32 pad;
	/* ACT_ENCAP: each PDR's tunnel's far end, as in a header; ACT_ENCAP6: its index in the
	 * slot's `struct peers6` */
	__u32 peer[MAX_PDRS];
	__u32 teid[MAX_PDRS]; /* ... and its TEID, network order */
};

struct usage {
	__u64 ul_bytes, ul_packets, dl_bytes, dl_packets;
};

/* A session's IPv6 tunnel peers (as in a header), apart from `struct session` so that it
 * stays one cache line: read only for an IPv6 tunnel. */
#define V6_PEERS 4
struct peers6 {
	__u32 a[V6_PEERS][4];
};

/* A QER's MBR in one direction: upf_dataplane::meter::TokenBucket, kept as its backlog in
 * ticks of 2^-24 ns (the time its spent tokens take to come back); `cost` the ticks of one
 * bit, `depth` of a full bucket (rate × averaging window), both computed by the adaptor. */
#define TICK_FRAC 24
struct bucket {
	__u64 cost, depth, backlog, last;
};

/* A URR's Volume Quota (upf_dataplane::usage::UrrState): the octets used since the grant,
 * total, uplink, downlink, against the limits `has` names (Q_*); exhausted once one is
 * reached. */
#define Q_TOTAL 1
#define Q_UL 2
#define Q_DL 4
struct quota {
	__u64 limit[3];
	__u64 used[3];
	__u32 has;
	__u32 exhausted;
	/* The octets counted here since the slot was set (total, uplink, downlink), never reset:
	 * the volume threshold is a level of them (`struct arm`). */
	__u64 seen[3];
	/* The `arm.gen` for which the threshold's (`fired`) and the quota's (`qfired`) report
	 * was raised: user space has not reported it while `arm.gen` is still that. */
	__u32 fired;
	__u32 qfired;
};

/* What a URR slot's reports are due at, written by user space only (so that its write never
 * loses a count of the program's): the levels of `struct quota`'s `seen` at which the volume
 * threshold is reached (VOLTH; `has` names them, Q_*), whether the quota's exhaustion is
 * reported (A_VOLQU), and the generation of this arming: each report is raised once a
 * generation, and user space writes the next one (new levels: `seen` at the report plus the
 * threshold) once it has made the report. Generation 0: nothing reported. */
#define A_VOLQU 8
struct arm {
	__u64 level[3];
	__u32 has;
	__u32 gen;
};

/* A report raised, on the ring buffer `crossings`: the session slot and the index of the URR
 * in it (what was crossed is read from `struct quota`). */
struct crossing {
	__u32 slot;
	__u32 urr;
};

/* A session's MBR buckets and URR quotas under one lock: a packet asks all of its PDR's
 * buckets and quotas, and takes from all or none, at once, whichever CPUs its session's
 * packets come on (per-CPU counts could not decide a shared quota: two CPUs would each
 * pass a packet where one crossing is allowed). */
struct qos {
	struct bpf_spin_lock lock;
	__u32 pad;
	struct bucket b[QOS_BUCKETS];
	struct quota q[URR_SLOTS];
};

/* The clock of the buckets: `ns` when `fixed` (tests: the reference's virtual `now`), else
 * bpf_ktime_get_ns(). */
struct clock {
	__u64 fixed, ns;
};

/* Shape index → the PDRs. Its size is set at load. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct shape);
} shapes SEC(".maps");

/* A key's session in a direct-mapped array (src/keys.rs): found by the key's low bits, one
 * cache line; `used` 0: look in the hash map. */
struct direct {
	__u32 key;
	__u32 used;
	struct session s;
	__u8 pad[8];
};

/* Set at load: the direct arrays' entries - 1 (a power of two - 1). */
const volatile __u32 direct_mask = 0;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct direct);
} uplink_direct SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct direct);
} downlink_direct SEC(".maps");

/* Downlink, when no UE address is the destination: the longest Framed Route holding it →
 * the session (its UE address in `ue`). Its size is set at load. */
struct route_key {
	__u32 prefixlen;
	__u32 addr; /* as in a header */
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1);
	__type(key, struct route_key);
	__type(value, struct session);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} downlink_routes SEC(".maps");

/* Uplink: local TEID (host order) → that TEID's PDRs. Sizes are set at load. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct session);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* memory as sessions come, not for the limit */
} uplink SEC(".maps");

/* Downlink: UE IPv4 address (as in a header) → the session's IP PDRs. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct session);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* memory as sessions come, not for the limit */
} downlink SEC(".maps");

/* An SDF filter for IPv6 packets, as upf_dataplane's Filter::matches decides it. Which end
 * is the UE's is decided per packet (`assigned`, or a prefix holding the packet's UE-side
 * address, not negated), since the UE's /64 holds many addresses. */
#define E6_ANY 0
#define E6_ASSIGNED 1
#define E6_PREFIX 2
#define E6_NONE 3 /* an IPv4 prefix: holds no IPv6 address */
struct end6 {
	__u64 net[2], mask[2]; /* as in a header */
	__u16 lo, hi;
	__u8 kind, neg;
	__u8 pad[2];
};

#define F6_NEVER 1 /* deny */
#define F6_PROTO 2
#define F6_SPI 4
#define F6_LABEL 8
#define F6_FLOW 16 /* a Flow Description (else ToS, SPI and flow label only) */
#define F6_OUT 32  /* its direction is out: with neither end the UE's, `to` is */
struct sdf6 {
	struct end6 from, to;
	__u32 label;
	__u32 spi; /* as in a header */
	__u8 flags, proto, tos, tos_mask;
	__u32 pad;
};

struct shape6 {
	struct sdf6 sdf[MAX_PDRS][MAX_SDF];
};

/* Shape index → its PDRs' SDF filters for IPv6 packets: written for the shapes of sessions
 * with a UE IPv6 prefix; an IPv6 packet that reaches a PDR with filters of a shape not here
 * is punted. Its size is set at load. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct shape6);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} shapes6 SEC(".maps");

/* Downlink IPv6: the /64 of a UE's prefix (its first 8 octets as in a header) → the
 * session's IP PDRs. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u64);
	__type(value, struct session);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} downlink6 SEC(".maps");

/* Session slot → its UE's IPv6 /64 (as in a header): the PDRs' UE check for IPv6. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} ue6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct usage);
} urrs SEC(".maps");

/* Session slot → its IPv6 tunnel peers. Its size is set at load. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct peers6);
} peers6 SEC(".maps");

/* 1 while an IPv6 G-PDU runs shifted (`run`), else 0. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} shifted SEC(".maps");

/* Session slot → its MBR buckets. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct qos);
} qos SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct clock);
} clock SEC(".maps");

/* URR counter slot (as `urrs`) → its `struct arm`. Its size is set at load. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct arm);
} arms SEC(".maps");

/* The reports raised (`struct crossing`), for user space to make; 4,096 of them waiting at
 * most (16 octets each with the record's header). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} crossings SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, N_STATS);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

/* Punts: the AF_XDP steering program of each port, tail-called for what is not claimed. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, N_PORTS);
	__type(key, __u32);
	__type(value, __u32);
} punt_to SEC(".maps");

/* The program for IPv6 inner packets (`xdp_engine6`), tail-called: a program of its own
 * keeps each within the verifier's limits and the IPv4 path as it was. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} engine6 SEC(".maps");

/* The port of each interface the engine is attached to: ifindex → PORT_*. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_INTERFACES);
	__type(key, __u32);
	__type(value, __u32);
} ingress_port SEC(".maps");

/* Egress: each port's interface, to redirect to and (`egress_ifindex`) to look up. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, N_PORTS);
	__type(key, __u32);
	__type(value, __u32);
} egress SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, N_PORTS);
	__type(key, __u32);
	__type(value, __u32);
} egress_ifindex SEC(".maps");

/* The IPv4 identification of the headers this CPU writes. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} ident SEC(".maps");

/* The uplink ACL (upf_dataplane::Acl::check4, its IPv4 tables as Acl::tables4 gives them,
 * loaded by src/acl.rs): up to ACL_TABLES hash tables probed in order, each slot the first
 * of a list of rules (in `acl_entries`) walked to the one flagged ACL_LAST. Set at load: the
 * tables in use, the longest list, the default (1: deny), whether `acl_reach` (the /16s some
 * rule's destination reaches) applies. */
#define ACL_TABLES 8
#define ACL_DENY 1
#define ACL_LAST 2
#define ACL_NEVER 0xffffffff
const volatile __u32 acl_tables_used = 0;
const volatile __u32 acl_longest = 0;
const volatile __u32 acl_default_deny = 0;
const volatile __u32 acl_reach_on = 0;
/* Some rule of the ACL can match an IPv6 packet: the program does not probe those tables,
 * it punts such packets from the UE; else they get the default. */
const volatile __u32 acl_judges_v6 = 0;

struct acl_table {
	__u64 meta_mask;
	__u32 min, src_mask, dst_mask, shift;
	__u32 slot_base, slots; /* its slots in `acl_slots` */
};

struct acl_entry {
	__u32 src_net, src_mask, dst_net, dst_mask; /* host order */
	__u32 idx;
	__u16 sport_lo, sport_span, dport_lo, dport_span;
	__u8 proto, proto_mask, flags, pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, ACL_TABLES);
	__type(key, __u32);
	__type(value, struct acl_table);
} acl_tables SEC(".maps");

/* Every table's slots, from its `slot_base`: the index in `acl_entries` of its list. Sizes
 * are set at load. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} acl_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct acl_entry);
} acl_entries SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64);
} acl_reach SEC(".maps");

static __always_inline void count(__u32 i)
{
	__u64 *c = bpf_map_lookup_elem(&stats, &i);
	if (c)
		*c += 1;
}

static __always_inline int punt(void)
{
	count(S_PUNTED);
	return XDP_PASS;
}

static __always_inline int drop(__u32 reason)
{
	count(reason);
	return XDP_DROP;
}

static __always_inline __u16 fold(__u32 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)s;
}

/* The one's-complement sum of a 20-octet IPv4 header (its checksum right: 0xffff). */
static __always_inline __u16 sum20(const __u16 *h)
{
	__u32 s = 0;
	int i;
#pragma unroll
	for (i = 0; i < 10; i++)
		s += h[i];
	return fold(s);
}

#define IPPROTO_ICMP_ 1
#define IPPROTO_ESP_ 50

/* Protocols whose first 4 octets are the ports (upf_wire::flow::ports): TCP, UDP, SCTP,
 * UDP-Lite. */
static __always_inline int has_ports(__u8 proto)
{
	return proto == 6 || proto == 17 || proto == 132 || proto == 136;
}

/* An IPv4 header without options, not a later fragment, whose total length (returned) is at
 * least 24 and fits `avail`; 0 otherwise. Any protocol: its ports as upf_wire's FiveTuple
 * reads them (flow_of). Shorter packets are punted: a port protocol's would be malformed,
 * and the rest are too rare to be worth a second bounds check. */
static __always_inline __u32 inner_len(const __u8 *ip, __u32 avail)
{
	__u32 total;

	if (ip[0] != 0x45)
		return 0;
	if ((bpf_ntohs(*(__u16 *)(ip + 6)) & 0x1fff) != 0)
		return 0;
	total = bpf_ntohs(*(__u16 *)(ip + 2));
	if (total < 24 || total > avail)
		return 0;
	return total;
}

static __always_inline int side(__u32 a, __u16 port, __u32 net, __u32 mask, __u16 lo, __u16 hi,
				int none, int neg)
{
	int hit = !none && (a & mask) == net;
	return hit != neg && port >= lo && port <= hi;
}

/* The packet (ports in host order, tos its IPv4 ToS octet) seen from the UE: `ue_a`/`ue_p`
 * its UE side; `spi` an ESP packet's (`has_spi`). */
struct key {
	__u32 ue_a, re_a;
	__u32 assigned; /* the session's UE address (SDF_UE_ASSIGNED) */
	__u32 spi;
	__u16 ue_p, re_p;
	__u8 proto, tos, has_spi;
};

/* What classification reads from the packet `ip` (an IPv4 header of `len` >= 24 octets, 24
 * of them checked readable, not a later fragment), as upf_dataplane::parse::flow_of: the
 * ports of a port protocol, an ICMP echo's identifier as both ports, 0 otherwise; an ESP
 * packet's SPI. Ports source first, as in the packet (`sdf_any` sees them from the UE). */
struct flow {
	__u32 spi;
	__u16 sp, dp;
	__u8 has_spi;
	__u8 tc;      /* IPv6: Traffic Class */
	__u32 label; /* IPv6: flow label */
};

static __always_inline void flow_of(const __u8 *ip, const void *end, __u32 len, struct flow *f)
{
	f->sp = 0, f->dp = 0, f->spi = 0, f->has_spi = 0;
	if (has_ports(ip[9])) {
		f->sp = bpf_ntohs(*(__u16 *)(ip + 20));
		f->dp = bpf_ntohs(*(__u16 *)(ip + 22));
	} else if (ip[9] == IPPROTO_ICMP_) {
		/* An ICMP header is 8 octets; echo request (8) or reply (0). `len` fits the
		 * frame, so the second check never fails (it is the verifier's). */
		if (len >= 28 && (void *)(ip + 28) <= end && (ip[20] == 0 || ip[20] == 8)) {
			f->sp = bpf_ntohs(*(__u16 *)(ip + 24));
			f->dp = f->sp;
		}
	} else if (ip[9] == IPPROTO_ESP_) {
		f->spi = *(__u32 *)(ip + 20);
		f->has_spi = 1;
	}
}

/* The extension headers upf_wire's ipv6::Packet::upper_layer walks (RFC 8200 §4, AH): a
 * packet with one is punted. */
static __always_inline int ext6(__u8 nh)
{
	return nh == 0 || nh == 43 || nh == 44 || nh == 60 || nh == 51 || nh == 135 || nh == 139 ||
	       nh == 140;
}

/* An IPv6 header followed by its upper-layer header (no extension header), at least 8 octets
 * of payload (ports, an ICMP header, an SPI readable), the whole fitting `avail`: its total
 * length; 0 otherwise. */
static __always_inline __u32 inner_len6(const __u8 *ip, __u32 avail)
{
	__u32 total;

	if (ip[0] >> 4 != 6 || ext6(ip[6]))
		return 0;
	total = 40 + bpf_ntohs(*(__u16 *)(ip + 4));
	if (total < 48 || total > avail)
		return 0;
	return total;
}

/* flow_of for an IPv6 packet `ip` of inner_len6's form (48 octets checked readable), as
 * upf_dataplane::parse::flow_of: the ports of a port protocol, an echo's identifier
 * (ICMPv6 types 128 and 129, under either ICMP protocol number) as both ports, an ESP
 * packet's SPI; its Traffic Class and flow label. */
static __always_inline void flow_of6(const __u8 *ip, struct flow *f)
{
	__u8 nh = ip[6];

	f->sp = 0, f->dp = 0, f->spi = 0, f->has_spi = 0;
	f->tc = (ip[0] & 0x0f) << 4 | ip[1] >> 4;
	f->label = (__u32)(ip[1] & 0x0f) << 16 | (__u32)ip[2] << 8 | ip[3];
	if (has_ports(nh)) {
		f->sp = bpf_ntohs(*(__u16 *)(ip + 40));
		f->dp = bpf_ntohs(*(__u16 *)(ip + 42));
	} else if (nh == 58 || nh == IPPROTO_ICMP_) {
		if (ip[40] == 128 || ip[40] == 129) {
			f->sp = bpf_ntohs(*(__u16 *)(ip + 44));
			f->dp = f->sp;
		}
	} else if (nh == IPPROTO_ESP_) {
		f->spi = *(__u32 *)(ip + 40);
		f->has_spi = 1;
	}
}

/* lookup::key_hash: the 64x64 -> 128-bit product of the key and the masked protocol and
 * ports, each xor-ed with a constant, folded onto itself; in 32-bit halves (BPF has no
 * 128-bit multiply). */
static __always_inline __u64 acl_hash(__u64 x, __u64 meta)
{
	__u64 a = x ^ 0x9e3779b97f4a7c15ULL, b = meta ^ 0xc2b2ae3d27d4eb4fULL;
	__u64 a0 = a & 0xffffffff, a1 = a >> 32, b0 = b & 0xffffffff, b1 = b >> 32;
	__u64 p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
	__u64 mid = (p00 >> 32) + (p01 & 0xffffffff) + (p10 & 0xffffffff);
	__u64 lo = (p00 & 0xffffffff) | (mid << 32);
	__u64 hi = p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
	return lo ^ hi;
}

static __always_inline int acl_match(const struct acl_entry *e, __u32 src, __u32 dst, __u8 proto,
				     __u16 sp, __u16 dp)
{
	__u32 addr = ((src & e->src_mask) ^ e->src_net) | ((dst & e->dst_mask) ^ e->dst_net);
	return !addr && !((proto & e->proto_mask) ^ e->proto) &&
	       (__u16)(sp - e->sport_lo) <= e->sport_span &&
	       (__u16)(dp - e->dport_lo) <= e->dport_span;
}

/* A list walk past its first rule (bpf_loop: the verifier checks the step once, whatever
 * the list's length). */
struct acl_walk {
	__u32 i; /* the next rule */
	__u32 best, flags;
	__u32 src, dst;
	__u16 sp, dp;
	__u8 proto;
};

/* One rule of a list, in rule order: the walk ends at a match, at a rule not better than the
 * best so far, or at the list's last. */
static long acl_step(__u64 n, struct acl_walk *w)
{
	const struct acl_entry *e = bpf_map_lookup_elem(&acl_entries, &w->i);

	if (!e || e->idx >= w->best)
		return 1;
	if (acl_match(e, w->src, w->dst, w->proto, w->sp, w->dp)) {
		w->best = e->idx;
		w->flags = e->flags;
		return 1;
	}
	w->i++;
	return e->flags & ACL_LAST ? 1 : 0;
}

/* Whether the uplink ACL denies the packet `ip` (its flow `fl`): Family::lookup. The first
 * matching rule (lowest index) decides, else the default. */
static __always_inline int acl_denies(const __u8 *ip, const struct flow *fl)
{
	struct acl_walk w = {
		.best = ACL_NEVER,
		.src = bpf_ntohl(*(__u32 *)(ip + 12)),
		.dst = bpf_ntohl(*(__u32 *)(ip + 16)),
		.sp = fl->sp,
		.dp = fl->dp,
		.proto = ip[9],
	};
	__u32 t;
	__u64 meta;

	if (!acl_tables_used)
		return acl_default_deny;
	if (acl_reach_on) {
		__u32 b = w.dst >> 16, k = b / 64;
		__u64 *r = bpf_map_lookup_elem(&acl_reach, &k);
		if (!r || !((*r >> (b % 64)) & 1))
			return acl_default_deny;
	}
	meta = (__u64)w.proto | (__u64)w.sp << 8 | (__u64)w.dp << 24;
#pragma unroll
	for (t = 0; t < ACL_TABLES; t++) {
		const struct acl_table *tb;
		const struct acl_entry *e;
		__u32 *first, i = t;
		__u64 h;

		if (t >= acl_tables_used)
			break;
		tb = bpf_map_lookup_elem(&acl_tables, &i);
		/* Tables come by ascending `min`: none from here on holds a better rule. */
		if (!tb || tb->min >= w.best)
			break;
		h = acl_hash((__u64)(w.src & tb->src_mask) | (__u64)(w.dst & tb->dst_mask) << 32,
			     meta & tb->meta_mask);
		h = tb->shift < 64 ? h >> tb->shift : 0;
		if (h >= tb->slots)
			continue;
		i = tb->slot_base + (__u32)h;
		first = bpf_map_lookup_elem(&acl_slots, &i);
		if (!first)
			continue;
		/* The first rule inline (most lists have one), the rest by bpf_loop. */
		w.i = *first;
		e = bpf_map_lookup_elem(&acl_entries, &w.i);
		if (!e || e->idx >= w.best)
			continue;
		if (acl_match(e, w.src, w.dst, w.proto, w.sp, w.dp)) {
			w.best = e->idx;
			w.flags = e->flags;
			continue;
		}
		if (e->flags & ACL_LAST)
			continue;
		w.i++;
		bpf_loop(acl_longest, acl_step, &w, 0);
	}
	return w.best == ACL_NEVER ? acl_default_deny : w.flags & ACL_DENY;
}

static __always_inline int sdf_match(const struct sdf *f, const struct key *k)
{
	if (f->flags & SDF_NEVER)
		return 0;
	if ((k->tos & f->tos_mask) != f->tos)
		return 0;
	if ((f->flags & SDF_SPI) && !(k->has_spi && k->spi == f->spi))
		return 0;
	if ((f->flags & SDF_PROTO) && k->proto != f->proto)
		return 0;
	return side(k->ue_a, k->ue_p, (f->flags & SDF_UE_ASSIGNED) ? k->assigned : f->ue_net,
		    f->ue_mask, f->ue_lo, f->ue_hi, f->flags & SDF_UE_NONE,
		    !!(f->flags & SDF_UE_NEG)) &&
	       side(k->re_a, k->re_p, f->re_net, f->re_mask, f->re_lo, f->re_hi,
		    f->flags & SDF_RE_NONE, !!(f->flags & SDF_RE_NEG));
}

/* Some SDF filter of `p` matches the packet `ip` (an IPv4 header, 24 octets readable; `fl`
 * its flow), or it has none. */
static __always_inline int sdf_any(const struct pdr *p, const __u8 *ip, const struct flow *fl,
				   __u32 ue)
{
	struct key k;
	__u32 src = *(__u32 *)(ip + 12), dst = *(__u32 *)(ip + 16);
	__u16 sp = fl->sp, dp = fl->dp;
	int j;

	if (!p->n_sdf)
		return 1;
	k.proto = ip[9];
	k.tos = ip[1];
	k.spi = fl->spi;
	k.has_spi = fl->has_spi;
	k.assigned = ue;
	if (p->uplink) {
		k.ue_a = src, k.ue_p = sp, k.re_a = dst, k.re_p = dp;
	} else {
		k.ue_a = dst, k.ue_p = dp, k.re_a = src, k.re_p = sp;
	}
	/* A bounded loop (not unrolled: 4 PDRs × 4 filters would be long). */
	for (j = 0; j < MAX_SDF; j++) {
		if (j >= p->n_sdf)
			break;
		if (sdf_match(&p->sdf[j], &k))
			return 1;
	}
	return 0;
}

/* Whether address `a` is in one of `p`'s Framed Routes. */
static __always_inline int routed(const struct pdr *p, __u32 a)
{
	int k;

#pragma unroll
	for (k = 0; k < MAX_ROUTES; k++) {
		if (k >= p->n_routes)
			break;
		if ((a & p->routes[k].mask) == p->routes[k].net)
			return 1;
	}
	return 0;
}

/* The index of the first of the PDRs `sh` (session `s`'s under the key) matching (QFI, UE
 * address or one in its Framed Routes, SDF filters, `assigned` the packet's UE-side
 * address) the packet `ip` (its flow `fl`), or -1. */
static __always_inline int classify(const struct session *s, const struct shape *sh, int has_qfi,
				    __u32 qfi, const __u8 *ip, const struct flow *fl)
{
	__u32 src = *(__u32 *)(ip + 12), dst = *(__u32 *)(ip + 16), assigned;
	int i;

#pragma unroll
	for (i = 0; i < MAX_PDRS; i++) {
		const struct pdr *p = &sh->pdrs[i];
		if (i >= sh->n_pdrs)
			break;
		if ((p->flags & PDR_NEVER) || (p->flags6 & P6_NO_V4))
			continue;
		if (p->qfis && !(has_qfi && (p->qfis >> (qfi & 63)) & 1))
			continue;
		assigned = s->ue;
		if (p->flags & PDR_UE) {
			__u32 a = (p->flags & PDR_UE_DST) ? dst : src;
			if (a != s->ue && !routed(p, a))
				continue;
			assigned = a;
		}
		if (!sdf_any(p, ip, fl, assigned))
			continue;
		return i;
	}
	return -1;
}

/* An IPv6 packet seen from the UE (`ue_a` its UE side's address, as in a header), for
 * sdf6_match; `has_ue`: the PDR names a UE IP, whose end of the packet is `asg` (what
 * `assigned` means). */
struct key6 {
	__u64 ue_a[2], re_a[2], asg[2];
	__u32 spi, label;
	__u16 ue_p, re_p;
	__u8 proto, tc, has_spi, has_ue;
};

/* Whether address `a` (as in a header) is in end `e`'s prefix. */
static __always_inline int in6(const struct end6 *e, const __u64 *a)
{
	return (a[0] & e->mask[0]) == e->net[0] && (a[1] & e->mask[1]) == e->net[1];
}

/* Filter's Side::is_ue: `assigned`, or a prefix holding the UE's address, not negated. */
static __always_inline int end6_is_ue(const struct end6 *e, const struct key6 *k)
{
	if (e->kind == E6_ASSIGNED)
		return 1;
	return e->kind == E6_PREFIX && !e->neg && k->has_ue && in6(e, k->asg);
}

/* Side::matches of address `a`, port `port`. */
static __always_inline int end6_matches(const struct end6 *e, const __u64 *a, __u16 port,
					const struct key6 *k)
{
	int hit = 0;

	if (e->kind == E6_ANY)
		hit = 1;
	else if (e->kind == E6_ASSIGNED)
		hit = !k->has_ue || (k->asg[0] == a[0] && k->asg[1] == a[1]);
	else if (e->kind == E6_PREFIX)
		hit = in6(e, a);
	return hit != e->neg && port >= e->lo && port <= e->hi;
}

/* Filter::matches for an IPv6 packet. */
static __always_inline int sdf6_match(const struct sdf6 *f, const struct key6 *k)
{
	const struct end6 *ue_end, *re_end;

	if ((k->tc & f->tos_mask) != f->tos)
		return 0;
	if ((f->flags & F6_SPI) && !(k->has_spi && k->spi == f->spi))
		return 0;
	if ((f->flags & F6_LABEL) && k->label != f->label)
		return 0;
	if (!(f->flags & F6_FLOW))
		return 1;
	if (f->flags & F6_NEVER)
		return 0;
	if ((f->flags & F6_PROTO) && k->proto != f->proto)
		return 0;
	if (end6_is_ue(&f->to, k) || (!end6_is_ue(&f->from, k) && (f->flags & F6_OUT))) {
		ue_end = &f->to;
		re_end = &f->from;
	} else {
		ue_end = &f->from;
		re_end = &f->to;
	}
	return end6_matches(ue_end, k->ue_a, k->ue_p, k) &&
	       end6_matches(re_end, k->re_a, k->re_p, k);
}

/* The walk of one PDR's IPv6 filters (bpf_loop: the verifier checks a filter once). */
struct walk6 {
	struct key6 k;
	__u32 shape, pdr;
	__u32 hit; /* 1: a filter matched; 2: the shape has no IPv6 filters (punt) */
};

static long sdf6_step(__u64 j, struct walk6 *w)
{
	__u32 idx = w->shape;
	const struct shape6 *s6 = bpf_map_lookup_elem(&shapes6, &idx);

	if (!s6) {
		w->hit = 2;
		return 1;
	}
	if (sdf6_match(&s6->sdf[w->pdr & (MAX_PDRS - 1)][j & (MAX_SDF - 1)], &w->k)) {
		w->hit = 1;
		return 1;
	}
	return 0;
}

/* classify for an IPv6 packet `ip` (inner_len6's form; `fl` its flow): the index of the
 * first PDR of `sh` matching it, -1 for none, -2 to punt it (a PDR with SDF filters of a
 * shape whose IPv6 filters are not in `shapes6`). A PDR naming a UE IP matches when the
 * packet's UE-side address is in the session's /64 (`ue6`); PDR_NEVER (another IPv4
 * address's) does not apply: a session has one IPv6 prefix. */
static __always_inline int classify6(const struct session *s, const struct shape *sh,
				     int has_qfi, __u32 qfi, const __u8 *ip, const struct flow *fl)
{
	const __u64 *pre = NULL;
	struct walk6 w = {};
	__u32 slot = s->slot;
	int i;

	w.shape = s->shape;
	w.k.proto = ip[6];
	w.k.tc = fl->tc;
	w.k.label = fl->label;
	w.k.spi = fl->spi;
	w.k.has_spi = fl->has_spi;
#pragma unroll
	for (i = 0; i < MAX_PDRS; i++) {
		const struct pdr *p = &sh->pdrs[i];

		if (i >= sh->n_pdrs)
			break;
		if (p->flags6 & P6_NO_V6)
			continue;
		if (p->qfis && !(has_qfi && (p->qfis >> (qfi & 63)) & 1))
			continue;
		w.k.has_ue = !!(p->flags & PDR_UE);
		if (w.k.has_ue) {
			/* The UE IP's end of the packet is its own (PDR_UE_DST); the filters'
			 * UE side is the PDR's direction's. */
			__builtin_memcpy(w.k.asg, ip + ((p->flags & PDR_UE_DST) ? 24 : 8), 16);
			if (!pre)
				pre = bpf_map_lookup_elem(&ue6, &slot);
			if (!pre)
				return -2;
			if (w.k.asg[0] != *pre)
				continue;
		}
		if (!p->n_sdf)
			return i;
		if (p->uplink) {
			__builtin_memcpy(w.k.ue_a, ip + 8, 16);
			__builtin_memcpy(w.k.re_a, ip + 24, 16);
			w.k.ue_p = fl->sp, w.k.re_p = fl->dp;
		} else {
			__builtin_memcpy(w.k.ue_a, ip + 24, 16);
			__builtin_memcpy(w.k.re_a, ip + 8, 16);
			w.k.ue_p = fl->dp, w.k.re_p = fl->sp;
		}
		w.pdr = i;
		w.hit = 0;
		bpf_loop(p->n_sdf, sdf6_step, &w, 0);
		if (w.hit == 2)
			return -2;
		if (w.hit)
			return i;
	}
	return -1;
}

/* The shape of session `s` under a key. */
static __always_inline const struct shape *shape_of(const struct session *s)
{
	__u32 i = s->shape;
	return bpf_map_lookup_elem(&shapes, &i);
}

/* The FAR's verdict before anything is changed: a drop reason, or -1 to forward. As
 * upf_dataplane's steps::forward orders it: target, routed hop (`ttl` the TTL or Hop Limit;
 * `routed`, the packet enters or leaves N6), gate. */
static __always_inline int verdict(const struct pdr *p, __u8 ttl, int routed)
{
	if (p->action == ACT_DROP)
		return R_FAR_DROP;
	if (p->action == ACT_NO_TARGET)
		return R_NO_FORWARDING_TARGET;
	if (routed && ttl <= 1)
		return R_TTL_EXPIRED;
	if (p->flags & PDR_GATE_SHUT)
		return R_GATE_CLOSED;
	return -1;
}

/* One routed hop: TTL - 1, checksum updated as upf_wire::checksum::update_u16 does (RFC 1624
 * eqn. 3). */
static __always_inline void route_hop(__u8 *ip)
{
	__u16 *w = (__u16 *)(ip + 8);
	__u16 *csum = (__u16 *)(ip + 10);
	__u16 old = bpf_ntohs(*w);
	__u16 new = old - 0x100;
	__u32 s = (__u16)~bpf_ntohs(*csum) + (__u32)(__u16)~old + new;
	ip[8] -= 1;
	*csum = bpf_htons((__u16)~fold(s));
}

static __always_inline void count_urrs(const struct session *s, const struct pdr *p, __u32 octets)
{
	int k;
#pragma unroll
	for (k = 0; k < MAX_PDR_URRS; k++) {
		__u32 i;
		struct usage *u;
		if (k >= p->n_urrs)
			break;
		i = s->slot * URR_SLOTS + (p->urr[k] & (URR_SLOTS - 1));
		u = bpf_map_lookup_elem(&urrs, &i);
		if (!u)
			continue;
		if (p->uplink) {
			u->ul_bytes += octets;
			u->ul_packets += 1;
		} else {
			u->dl_bytes += octets;
			u->dl_packets += 1;
		}
	}
}

static __always_inline __u64 sat_add(__u64 a, __u64 b)
{
	__u64 s = a + b;
	return s < a ? ~0ULL : s;
}

static __always_inline __u64 sat_mul(__u64 a, __u64 b)
{
	__u64 most;

	if (!a)
		return 0;
	most = ~0ULL / a;
	/* Opaque to clang, which would otherwise turn the test into a 128-bit multiply (a
	 * libcall BPF does not have). */
	asm volatile("" : "+r"(most));
	if (b > most)
		return ~0ULL;
	return a * b;
}

/* TokenBucket::conforms: drains the backlog by the time since `last` (never back in time),
 * then whether `bits` fit. */
static __always_inline int conforms(struct bucket *b, __u64 now, __u64 bits)
{
	__u64 passed = now > b->last ? now - b->last : 0;
	__u64 ticks;

	if (passed > (~0ULL >> TICK_FRAC))
		passed = ~0ULL >> TICK_FRAC;
	ticks = passed << TICK_FRAC;
	b->backlog = b->backlog > ticks ? b->backlog - ticks : 0;
	if (now > b->last)
		b->last = now;
	return sat_add(b->backlog, sat_mul(bits, b->cost)) <= b->depth;
}

/* TokenBucket::take: the backlog is at most the depth. */
static __always_inline void take(struct bucket *b, __u64 bits)
{
	__u64 v = sat_add(b->backlog, sat_mul(bits, b->cost));
	b->backlog = v < b->depth ? v : b->depth;
}

/* UrrState::count for the quota: the packet that reaches it passes, the next ones not; and
 * UrrState::check for the reports `a` asks for (none: NULL): the quota's exhaustion (VOLQU),
 * else the volume threshold reached (VOLTH), once a generation. Returns whether a report was
 * raised. */
static __always_inline int use_quota(struct quota *u, const struct arm *a, __u32 octets,
				     int uplink)
{
	int was = u->exhausted;

	u->seen[0] += octets;
	u->seen[uplink ? 1 : 2] += octets;
	if (u->has) {
		u->used[0] += octets;
		u->used[uplink ? 1 : 2] += octets;
		if (((u->has & Q_TOTAL) && u->used[0] >= u->limit[0]) ||
		    ((u->has & Q_UL) && u->used[1] >= u->limit[1]) ||
		    ((u->has & Q_DL) && u->used[2] >= u->limit[2]))
			u->exhausted = 1;
	}
	if (!a || !a->gen)
		return 0;
	if (u->exhausted) {
		if (was || !(a->has & A_VOLQU))
			return 0;
		u->qfired = a->gen;
		return 1;
	}
	if (u->fired == a->gen)
		return 0;
	if (((a->has & Q_TOTAL) && u->seen[0] >= a->level[0]) ||
	    ((a->has & Q_UL) && u->seen[1] >= a->level[1]) ||
	    ((a->has & Q_DL) && u->seen[2] >= a->level[2])) {
		u->fired = a->gen;
		return 1;
	}
	return 0;
}

/* Announces a report raised for URR `urr` of session slot `slot`. */
static __always_inline void announce(__u32 slot, __u32 urr)
{
	struct crossing *c = bpf_ringbuf_reserve(&crossings, sizeof(*c), 0);

	if (!c) {
		count(S_CROSSINGS_LOST);
		return;
	}
	c->slot = slot;
	c->urr = urr;
	bpf_ringbuf_submit(c, 0);
}

/* The MBRs of `p`'s QERs in its direction and the quotas of its URRs, in steps::forward's
 * order: every bucket conforms (else mbr_exceeded), no quota is exhausted (else
 * quota_exhausted), and only then is anything taken, so a packet dropped takes nothing.
 * Returns the drop reason, or -1 to forward. */
static __always_inline int police(const struct session *s, const struct pdr *p, __u32 octets)
{
	__u32 zero = 0, slot = s->slot;
	__u64 now, bits = (__u64)octets * 8;
	struct clock *c;
	struct qos *q;
	const struct arm *arm[MAX_PDR_URRS] = {};
	int raised[MAX_PDR_URRS] = {};
	int k, why = -1;

	if (!p->n_mbrs && !(p->flags & PDR_QUOTA))
		return -1;
	if (p->flags & PDR_QUOTA) {
		/* Looked up before the lock, under which no helper may be called. */
#pragma unroll
		for (k = 0; k < MAX_PDR_URRS; k++) {
			__u32 i = slot * URR_SLOTS + (p->urr[k] & (URR_SLOTS - 1));
			if (k >= p->n_urrs)
				break;
			arm[k] = bpf_map_lookup_elem(&arms, &i);
		}
	}
	c = bpf_map_lookup_elem(&clock, &zero);
	now = c && c->fixed ? c->ns : bpf_ktime_get_ns();
	q = bpf_map_lookup_elem(&qos, &slot);
	if (!q)
		return R_MBR_EXCEEDED; /* the adaptor wrote the slot before the session */
	bpf_spin_lock(&q->lock);
#pragma unroll
	for (k = 0; k < MAX_PDR_MBRS; k++) {
		if (k >= p->n_mbrs)
			break;
		if (!conforms(&q->b[p->mbr[k] & (QOS_BUCKETS - 1)], now, bits)) {
			why = R_MBR_EXCEEDED;
			break;
		}
	}
	if (why < 0 && (p->flags & PDR_QUOTA)) {
#pragma unroll
		for (k = 0; k < MAX_PDR_URRS; k++) {
			if (k >= p->n_urrs)
				break;
			if (q->q[p->urr[k] & (URR_SLOTS - 1)].exhausted)
				why = R_QUOTA_EXHAUSTED;
		}
	}
	if (why < 0) {
#pragma unroll
		for (k = 0; k < MAX_PDR_MBRS; k++) {
			if (k >= p->n_mbrs)
				break;
			take(&q->b[p->mbr[k] & (QOS_BUCKETS - 1)], bits);
		}
#pragma unroll
		for (k = 0; k < MAX_PDR_URRS; k++) {
			if (k >= p->n_urrs)
				break;
			if (p->flags & PDR_QUOTA)
				raised[k] = use_quota(&q->q[p->urr[k] & (URR_SLOTS - 1)], arm[k],
						      octets, p->uplink);
		}
	}
	bpf_spin_unlock(&q->lock);
#pragma unroll
	for (k = 0; k < MAX_PDR_URRS; k++) {
		if (raised[k])
			announce(slot, p->urr[k] & (URR_SLOTS - 1));
	}
	return why;
}

/* The Ethernet header: addresses `addrs` (destination, source), IPv6 if `v6` else IPv4. */
static __always_inline void write_eth(struct ethhdr *eth, const __u8 *addrs, int v6)
{
	__builtin_memcpy(eth->h_dest, addrs, 6);
	__builtin_memcpy(eth->h_source, addrs + 6, 6);
	eth->h_proto = v6 ? bpf_htons(ETH_P_IPV6) : bpf_htons(ETH_P_IP);
}

/* The answer of bpf_fib_lookup for `f` (all but the interface filled in) leaving by `port`:
 * 0 with the Ethernet destination and source in `addrs`, else the stats index of why there
 * is none (the packet is punted unchanged). An output lookup on the port's interface: the
 * kernel's routes and neighbours, as the user-space engine sends. */
static __always_inline int fib_answer(struct xdp_md *ctx, struct bpf_fib_lookup *f, __u32 port,
				      __u8 *addrs)
{
	__u32 *ifi = bpf_map_lookup_elem(&egress_ifindex, &port);
	long rc;

	if (!ifi || !*ifi)
		return S_OTHER_INTERFACE;
	f->ifindex = *ifi;
	rc = bpf_fib_lookup(ctx, f, sizeof(*f), BPF_FIB_LOOKUP_OUTPUT);
	if (rc < 0)
		return S_FIB_ERROR;
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return rc <= 9 ? S_FIB - 1 + (int)rc : S_FIB_ERROR;
	if (f->ifindex != *ifi)
		return S_OTHER_INTERFACE;
	__builtin_memcpy(addrs, f->dmac, 6);
	__builtin_memcpy(addrs + 6, f->smac, 6);
	return 0;
}

/* The next hop of an IPv4 packet (src, dst, proto, tos, ports as in a header, its total
 * length) leaving by `port` (fib_answer; `p`'s fixed hop with fixed_hops). */
static __always_inline int next_hop(struct xdp_md *ctx, const struct pdr *p, __u32 port,
				    __u32 src, __u32 dst, __u8 proto, __u8 tos, __u16 sport,
				    __u16 dport, __u32 tot_len, __u8 *addrs)
{
	struct bpf_fib_lookup f = {};

	if (fixed_hops) {
		__builtin_memcpy(addrs, p->eth, 12);
		return 0;
	}
	f.family = AF_INET;
	f.l4_protocol = proto;
	f.sport = sport;
	f.dport = dport;
	f.tot_len = (__u16)tot_len;
	f.tos = tos;
	f.ipv4_src = src;
	f.ipv4_dst = dst;
	return fib_answer(ctx, &f, port, addrs);
}

/* The same for an IPv6 packet from `src` to `dst` (as in a header) of protocol `proto`,
 * `flowinfo` its traffic class and flow label (as in a header), `tot_len` octets in all. */
static __always_inline int next_hop6(struct xdp_md *ctx, const struct pdr *p, __u32 port,
				     const volatile __u32 *src, const __u32 *dst, __u8 proto,
				     __u32 flowinfo, __u16 sport, __u16 dport, __u32 tot_len,
				     __u8 *addrs)
{
	struct bpf_fib_lookup f = {};
	int k;

	if (fixed_hops) {
		__builtin_memcpy(addrs, p->eth, 12);
		return 0;
	}
	f.family = AF_INET6;
	f.l4_protocol = proto;
	f.sport = sport;
	f.dport = dport;
	f.tot_len = (__u16)tot_len;
	f.flowinfo = flowinfo;
#pragma unroll
	for (k = 0; k < 4; k++) {
		f.ipv6_src[k] = src[k];
		f.ipv6_dst[k] = dst[k];
	}
	return fib_answer(ctx, &f, port, addrs);
}

/* Sends the rewritten frame out of `port`: XDP_TX when that is the arriving interface (or
 * with fixed hops), else redirected through `egress`. */
static __always_inline int leave(struct xdp_md *ctx, __u32 port)
{
	__u32 *ifi;
	long rc = XDP_TX;

	if (!fixed_hops) {
		ifi = bpf_map_lookup_elem(&egress_ifindex, &port);
		if (!ifi || *ifi != ctx->ingress_ifindex)
			rc = bpf_redirect_map(&egress, port, 0);
		if (rc != XDP_TX && rc != XDP_REDIRECT)
			return drop(R_ENCAP_FAILED);
	}
	count(S_FORWARDED);
	return (int)rc;
}

/* The PDU Session Container of `p`'s tunnel (steps::emit's mark): 1 with its two octets
 * (PDU type, QFI with RQI) in `c`, 0 for none. To the access side, the QER's QFI, else the
 * arriving one (`has_qfi`, `qfi`); to the core, the arriving QFI first. */
static __always_inline int container(const struct pdr *p, int has_qfi, __u32 qfi, __u8 *c)
{
	if (p->flags & PDR_TO_CORE) {
		c[0] = 0x10;
		c[1] = has_qfi ? qfi & 0x3f : p->psc_octet & 0x3f;
		return has_qfi || (p->flags & PDR_PSC);
	}
	c[0] = 0;
	c[1] = (p->flags & PDR_PSC) ? p->psc_octet : (p->psc_octet & 0x40) | (qfi & 0x3f);
	return (p->flags & PDR_PSC) || has_qfi;
}

/* The source address of `p`'s tunnel. */
static __always_inline __u32 local_of(const struct pdr *p)
{
	return (p->flags & PDR_ON_N9) ? n9_addr : n3_addr;
}

/* ... of its IPv6 tunnel. */
static __always_inline const volatile __u32 *local6_of(const struct pdr *p)
{
	return (p->flags & PDR_ON_N9) ? n9_addr6 : n3_addr6;
}

/* The UDP header (checksum 0) and the GTP-U G-PDU header of a tunnel at `u`: `ulen` octets of
 * UDP, TEID `teid` (network order); with `psc`, sequence and N-PDU 0, next extension 0x85,
 * a one-word PDU Session Information `c`. */
static __always_inline void write_udp_gtpu(__u8 *u, __u32 ulen, __u32 teid, int psc,
					   const __u8 *c)
{
	*(__u16 *)(u + 0) = bpf_htons(GTPU_PORT);
	*(__u16 *)(u + 2) = bpf_htons(GTPU_PORT);
	*(__u16 *)(u + 4) = bpf_htons(ulen);
	*(__u16 *)(u + 6) = 0;
	u[9] = 0xff;
	*(__u16 *)(u + 10) = bpf_htons(ulen - 16);
	*(__u32 *)(u + 12) = teid;
	if (psc) {
		u[8] = 0x34;
		*(__u32 *)(u + 16) = bpf_htonl(0x85);
		u[20] = 1;
		u[21] = c[0];
		u[22] = c[1];
		u[23] = 0;
	} else {
		u[8] = 0x30;
	}
}

/* Fits a frame of `frame` octets whose packet (`len` octets) is `at` octets after the
 * Ethernet header to an Ethernet header, `hdr` octets of new headers and the packet: the
 * tail cut at the packet's end, the head moved. Nonzero when the kernel refuses. */
static __always_inline int fit_frame(struct xdp_md *ctx, __u32 frame, __u32 at, __u32 len,
				     __u32 hdr)
{
	if (frame > at + len && bpf_xdp_adjust_tail(ctx, -(int)(frame - at - len)))
		return -1;
	if (at != hdr && bpf_xdp_adjust_head(ctx, (int)at - (int)hdr))
		return -1;
	return 0;
}

/* Puts the inner packet, `len` octets `at` octets after the Ethernet header of a frame of
 * `frame` octets, into `p`'s tunnel to `peer`/`teid` (network order) with a header of `hdr`
 * octets (44: container `c`), the Ethernet addresses `addrs`, and sends it out of N3
 * (upf_wire::encap::encapsulate_gtpu_v4: no DF, the inner ECN `ecn` copied, RFC 6040; UDP
 * checksum 0). */
static __always_inline int into_tunnel(struct xdp_md *ctx, const struct pdr *p, __u32 frame,
				       __u32 at, __u32 len, __u32 hdr, __u32 peer, __u32 teid,
				       const __u8 *c, const __u8 *addrs, __u8 ecn)
{
	void *data;
	void *end;
	__u32 zero = 0, *id;
	__u16 *o;
	__u8 *h;

	if (fit_frame(ctx, frame, at, len, hdr))
		return drop(R_ENCAP_FAILED);
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	h = data + sizeof(struct ethhdr);
	if ((void *)(h + 44) > end)
		return drop(R_ENCAP_FAILED);
	write_eth(data, addrs, 0);
	id = bpf_map_lookup_elem(&ident, &zero);
	if (!id)
		return drop(R_ENCAP_FAILED);
	*id += 1;
	h[0] = 0x45;
	h[1] = p->tos | ecn;
	*(__u16 *)(h + 2) = bpf_htons(hdr + len);
	*(__u16 *)(h + 4) = bpf_htons((__u16)*id);
	*(__u16 *)(h + 6) = 0;
	h[8] = outer_ttl;
	h[9] = 17;
	*(__u16 *)(h + 10) = 0;
	*(__u32 *)(h + 12) = local_of(p);
	*(__u32 *)(h + 16) = peer;
	write_udp_gtpu(h + 20, hdr - 20 + len, teid, hdr == 44, c);
	o = (__u16 *)h;
	o[5] = ~sum20(o);
	return leave(ctx, PORT_N3);
}

/* The one's-complement sum (`acc`, host-order words, unfolded) of `left` octets of the frame
 * from `at` (from its start), by bpf_loop steps: 512 octets at a time (bpf_csum_diff's
 * most), then 32, then 4, then the last 1 to 3 padded with zeros. `left` is 0 once done. */
struct csum_walk {
	struct xdp_md *ctx;
	__u64 acc;
	__u32 at, left;
};

#define CSUM_STEPS 160 /* 65,535 octets: 127 steps of 512, 15 of 32, 7 of 4, the rest */

/* One step of `size` octets (a constant where it is called: bpf_csum_diff wants one) at
 * `q`: 0 to go on, 1 to stop (the frame ends first, or the helper failed). */
static __always_inline long csum_chunk(struct csum_walk *w, __u8 *q, void *end, __u32 size)
{
	__s64 r;

	if ((void *)(q + size) > end)
		return 1;
	r = bpf_csum_diff(0, 0, (__be32 *)q, size, 0);
	if (r < 0)
		return 1;
	w->acc += (__u32)r;
	w->at += size;
	w->left -= size;
	return 0;
}

static long csum_step(__u64 n, struct csum_walk *w)
{
	void *data = (void *)(long)w->ctx->data;
	void *end = (void *)(long)w->ctx->data_end;
	__u8 *q = data + (w->at & 0x3fff);
	__u32 t = 0;

	if (w->left >= 512)
		return csum_chunk(w, q, end, 512);
	if (w->left >= 32)
		return csum_chunk(w, q, end, 32);
	if (w->left >= 4) {
		if ((void *)(q + 4) > end)
			return 1;
		w->acc += *(__u32 *)q;
		w->at += 4;
		w->left -= 4;
		return 0;
	}
	if (w->left) {
		if ((void *)(q + 1) > end)
			return 1;
		((__u8 *)&t)[0] = q[0];
		if (w->left > 1) {
			if ((void *)(q + 2) > end)
				return 1;
			((__u8 *)&t)[1] = q[1];
		}
		if (w->left > 2) {
			if ((void *)(q + 3) > end)
				return 1;
			((__u8 *)&t)[2] = q[2];
		}
		w->acc += t;
		w->left = 0;
	}
	return 1;
}

/* The Internet checksum of a sum of host-order words: its complement, folded; 0 is sent as
 * 0xffff (UDP: RFC 768, RFC 8200 §8.1). Stored as it is, it is in network order. */
static __always_inline __u16 udp_csum(__u64 acc)
{
	__u16 c;

	acc = (acc & 0xffffffff) + (acc >> 32);
	acc = (acc & 0xffffffff) + (acc >> 32);
	c = (__u16)~fold((__u32)acc);
	return c ? c : 0xffff;
}

/* The IPv6 peer of session `s`'s `k`th PDR's tunnel (its slot's `struct peers6`), or 0. */
static __always_inline const __u32 *peer6_of(const struct session *s, __u32 k)
{
	__u32 slot = s->slot;
	struct peers6 *ps = bpf_map_lookup_elem(&peers6, &slot);

	return ps ? ps->a[s->peer[k & (MAX_PDRS - 1)] & (V6_PEERS - 1)] : 0;
}

/* into_tunnel for `p`'s IPv6 tunnel (the `k`th of session `s`), `hdr` 56 or 64 octets
 * (upf_wire::encap::encapsulate_gtpu_v6: traffic class the marking with the inner ECN, flow
 * label 0, hop limit outer_ttl; the UDP checksum over the pseudo-header and the datagram). */
static __always_inline int into_tunnel6(struct xdp_md *ctx, const struct session *s,
					const struct pdr *p, __u32 k, __u32 frame, __u32 at,
					__u32 len, __u32 hdr, const __u8 *c, const __u8 *addrs,
					__u8 ecn)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u8 *ip = data + sizeof(struct ethhdr) + (at & 127);
	const volatile __u32 *src = local6_of(p);
	const __u32 *peer = peer6_of(s, k);
	__u32 ulen = hdr - 40 + len;
	struct csum_walk w = {};
	__u8 *h, tc;
	__s64 r;
	int j;

	if (!peer || (void *)(ip + 2) > end)
		return drop(R_ENCAP_FAILED);
	tc = p->tos | ecn;
	if (fit_frame(ctx, frame, at, len, hdr))
		return drop(R_ENCAP_FAILED);
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	h = data + sizeof(struct ethhdr);
	if ((void *)(h + 64) > end)
		return drop(R_ENCAP_FAILED);
	write_eth(data, addrs, 1);
	*(__u32 *)h = bpf_htonl(0x60000000 | (__u32)tc << 20);
	*(__u16 *)(h + 4) = bpf_htons(ulen);
	h[6] = 17;
	h[7] = outer_ttl;
#pragma unroll
	for (j = 0; j < 4; j++) {
		*(__u32 *)(h + 8 + 4 * j) = src[j];
		*(__u32 *)(h + 24 + 4 * j) = peer[j];
	}
	write_udp_gtpu(h + 40, ulen, s->teid[k & (MAX_PDRS - 1)], hdr == 64, c);
	/* The pseudo-header: both addresses, the UDP length, the protocol. */
	r = bpf_csum_diff(0, 0, (__be32 *)(h + 8), 32, 0);
	if (r < 0)
		return drop(R_ENCAP_FAILED);
	w.acc = (__u32)r + (__u64)bpf_htonl(ulen) + bpf_htonl(17);
	w.ctx = ctx;
	w.at = sizeof(struct ethhdr) + 40;
	w.left = ulen;
	bpf_loop(CSUM_STEPS, csum_step, &w, 0);
	if (w.left)
		return drop(R_ENCAP_FAILED);
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	h = data + sizeof(struct ethhdr);
	if ((void *)(h + 48) > end)
		return drop(R_ENCAP_FAILED);
	*(__u16 *)(h + 46) = udp_csum(w.acc);
	return leave(ctx, PORT_N3);
}

/* Whether `p` forwards into an IPv6 tunnel: read again where it is needed, so that the
 * verifier's states of the two kinds of tunnel are alike in between (and pruned as one). */
static __always_inline int tunnel6(const struct pdr *p)
{
	return *(volatile const __u8 *)&p->action == ACT_ENCAP6;
}

/* The inner packet (`len` octets, `at` after the Ethernet header of a `frame`-octet frame,
 * IPv6 if `v6`, arrived with QFI `qfi` if `has_qfi`) of session `s`, forwarded by its `i`th
 * PDR `p` into its tunnel (IPv4 or IPv6): the next hop first (none: punted, nothing charged),
 * then the
 * QERs and URRs, the routed hop if `routed` (from N6). */
static __always_inline int tunnel_out(struct xdp_md *ctx, const struct session *s,
				      const struct pdr *p, int i, __u32 frame, __u32 at, __u32 len,
				      int has_qfi, __u32 qfi, int routed, int v6)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u8 *ip = data + sizeof(struct ethhdr) + (at & 127);
	__u32 k = i & (MAX_PDRS - 1), peer = s->peer[k], hdr;
	const __u32 *peer6;
	__u8 addrs[12], c[2], ecn;
	int why;

	if ((void *)(ip + 20) > end)
		return drop(R_ENCAP_FAILED);
	/* RFC 6040: the outer ECN is the inner's (steps::ecn_of). */
	ecn = v6 ? (ip[1] >> 4) & 3 : ip[1] & 3;
	hdr = container(p, has_qfi, qfi, c) ? 44 : 36;
	if (tunnel6(p)) {
		peer6 = peer6_of(s, k);
		if (!peer6)
			return punt();
		why = next_hop6(ctx, p, PORT_N3, local6_of(p), peer6, 17,
				bpf_htonl((__u32)(p->tos | ecn) << 20), bpf_htons(GTPU_PORT),
				bpf_htons(GTPU_PORT), hdr + 20 + len, addrs);
	} else {
		why = next_hop(ctx, p, PORT_N3, local_of(p), peer, 17, p->tos | ecn,
			       bpf_htons(GTPU_PORT), bpf_htons(GTPU_PORT), hdr + len, addrs);
	}
	if (why) {
		count(why);
		return punt();
	}
	why = police(s, p, len);
	if (why >= 0)
		return drop(why);
	if (routed) {
		if (v6)
			ip[7] -= 1; /* the Hop Limit: no checksum */
		else
			route_hop(ip);
	}
	count_urrs(s, p, len);
	if (tunnel6(p))
		return into_tunnel6(ctx, s, p, k, frame, at, len, hdr + 20, c, addrs, ecn);
	return into_tunnel(ctx, p, frame, at, len, hdr, peer, s->teid[k], c, addrs, ecn);
}

/* Sends the inner packet (`len` octets after `hdr` of outer headers in a `frame`-octet
 * frame, of Ethernet type `proto`) to N6 with the Ethernet addresses `addrs`: the padding
 * after it goes, then the outer headers (the last 14 octets of them become the new Ethernet
 * header). */
static __always_inline int to_n6(struct xdp_md *ctx, __u32 frame, __u32 hdr, __u32 len,
				 const __u8 *addrs, __u16 proto)
{
	void *data, *end;

	if (frame > hdr + len && bpf_xdp_adjust_tail(ctx, -(int)(frame - hdr - len)))
		return drop(R_ENCAP_FAILED);
	if (bpf_xdp_adjust_head(ctx, (int)hdr))
		return drop(R_ENCAP_FAILED);
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if (data + sizeof(struct ethhdr) > end)
		return drop(R_ENCAP_FAILED);
	write_eth(data, addrs, proto);
	return leave(ctx, PORT_N6);
}

/* Whether the uplink ACL denies an IPv6 packet from the UE: punted (-1) when some rule could
 * match it, else the default. */
static __always_inline int acl6(void)
{
	return acl_judges_v6 ? -1 : (int)acl_default_deny;
}

/* What the outer headers of a G-PDU to us say: the octets before the inner packet, the outer
 * IP packet's, the TEID, and the QFI of its container (`has_qfi`). */
struct outer {
	__u32 hdr, total, teid, qfi;
	int has_qfi;
};

/* The GTP-U header at `g` (`at` octets into the outer IP packet) of a message of `n` octets
 * (the UDP payload) in the frame (`end`), as upf_dataplane::fast::gpdu_v4 takes it: a G-PDU
 * whose length is `n`'s, without options or with exactly one one-word PDU Session Container
 * (its QFI read), 24 octets of the inner packet readable. `general`: as upf_wire's decoder
 * takes it (the reference's for IPv6), which also refuses a DL container whose PPP flag asks
 * for a PPI octet the one word has no room for (the fast path reads its QFI). 1 with `o`
 * filled but its `total`, else 0. */
static __always_inline int gtpu_of(const __u8 *g, const void *end, __u32 n, __u32 at,
				   struct outer *o, int general)
{
	if (bpf_ntohs(*(__u16 *)(g + 2)) + 8 != n || g[1] != 0xff)
		return 0;
	o->teid = bpf_ntohl(*(__u32 *)(g + 4));
	if (g[0] == 0x30) {
		o->hdr = at + 8;
		o->has_qfi = 0;
		o->qfi = 0;
		return 1;
	}
	if (g[0] == 0x34 && n >= 16 && (void *)(g + 16 + 24) <= end && g[11] == 0x85 &&
	    g[12] == 1 && g[15] == 0 && g[13] >> 4 <= 1 &&
	    !(general && g[13] >> 4 == 0 && (g[14] & 0x80))) {
		o->hdr = at + 16;
		o->has_qfi = 1;
		o->qfi = g[14] & 0x3f;
		return 1;
	}
	return 0;
}

/* A G-PDU in IPv4 (`d`, the frame `frame` octets from it): upf_dataplane::fast::gpdu_v4, and
 * UDP to our GTP-U port at our N3 address. */
static __always_inline int gpdu4(const __u8 *d, const void *end, __u32 frame, struct outer *o)
{
	__u32 total;

	if ((void *)(d + 36 + 24) > end)
		return 0;
	total = bpf_ntohs(*(__u16 *)(d + 2));
	if (total > frame || (bpf_ntohs(*(__u16 *)(d + 6)) & 0x3fff) != 0 ||
	    bpf_ntohs(*(__u16 *)(d + 24)) + 20 != total || sum20((const __u16 *)d) != 0xffff)
		return 0;
	if (*(__u32 *)(d + 16) != n3_addr || *(__u16 *)(d + 22) != bpf_htons(GTPU_PORT))
		return 0;
	o->total = total;
	return gtpu_of(d + 28, end, total - 28, 28, o, 0);
}

/* A G-PDU in IPv6 without extension headers to our N3 address and GTP-U port, its lengths
 * consistent, as upf_wire::encap::decapsulate reads it (the reference has no fast path for
 * IPv6; it checks no UDP checksum). */
static __always_inline int gpdu6(const __u8 *d, const void *end, __u32 frame, struct outer *o)
{
	__u32 plen;

	if (!has_n3_addr6 || (void *)(d + 56 + 24) > end)
		return 0;
	plen = bpf_ntohs(*(__u16 *)(d + 4));
	if (d[0] >> 4 != 6 || d[6] != 17 || 40 + plen > frame)
		return 0;
	if (*(__u32 *)(d + 24) != n3_addr6[0] || *(__u32 *)(d + 28) != n3_addr6[1] ||
	    *(__u32 *)(d + 32) != n3_addr6[2] || *(__u32 *)(d + 36) != n3_addr6[3])
		return 0;
	if (*(__u16 *)(d + 42) != bpf_htons(GTPU_PORT) || bpf_ntohs(*(__u16 *)(d + 44)) != plen)
		return 0;
	o->total = 40 + plen;
	return gtpu_of(d + 48, end, plen - 8, 48, o, 1);
}

/* The session of uplink TEID `teid`, or NULL. */
static __always_inline struct session *session_of_teid(__u32 teid)
{
	__u32 i = teid & direct_mask;
	struct direct *d = bpf_map_lookup_elem(&uplink_direct, &i);

	return d && d->used && d->key == teid ? &d->s : bpf_map_lookup_elem(&uplink, &teid);
}

/* uplink_gpdu's answer for an IPv6 inner packet: run() hands the frame, as it came, to
 * `xdp_engine6`. */
#define RC_INNER6 100

/* The IPv6 inner packet of a G-PDU whose outer headers (`o`) were read, as uplink_gpdu does
 * an IPv4 one (in `xdp_engine6`: the outer headers as they came). */
static __always_inline int uplink6(struct xdp_md *ctx, __u32 frame, const struct outer *o)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 hdr = o->hdr, qfi = o->qfi;
	__u8 *ip = data + sizeof(struct ethhdr) + (hdr & 127);
	int has_qfi = o->has_qfi;
	const struct session *s = session_of_teid(o->teid);
	const struct shape *sh;
	const struct pdr *p;
	struct flow fl;
	__u8 addrs[12];
	__u32 len;
	int why, i;

	if (!s)
		return punt();
	if ((void *)(ip + 48) > end)
		return punt();
	len = inner_len6(ip, o->total - hdr);
	if (!len)
		return punt();
	sh = shape_of(s);
	if (!sh)
		return punt();
	flow_of6(ip, &fl);
	i = classify6(s, sh, has_qfi, qfi, ip, &fl);
	if (i == -2)
		return punt();
	if (i < 0)
		return drop(R_NO_MATCHING_PDR);
	p = &sh->pdrs[i & (MAX_PDRS - 1)];
	if (p->uplink) {
		why = acl6();
		if (why < 0)
			return punt();
		if (why)
			return drop(R_ACL_DENIED);
	}
	why = verdict(p, ip[7], p->action == ACT_N6);
	if (why >= 0)
		return drop(why);
	if (p->action == ACT_ENCAP || p->action == ACT_ENCAP6)
		return tunnel_out(ctx, s, p, i, frame, hdr, len, has_qfi, qfi, 0, 1);
	if (p->action != ACT_N6)
		return punt();
	why = next_hop6(ctx, p, PORT_N6, (const __u32 *)(ip + 8), (const __u32 *)(ip + 24), ip[6],
			*(__u32 *)ip & bpf_htonl(0x0fffffff), *(__u16 *)(ip + 40),
			*(__u16 *)(ip + 42), len, addrs);
	if (why) {
		count(why);
		return punt();
	}
	why = police(s, p, len);
	if (why >= 0)
		return drop(why);
	ip[7] -= 1;
	count_urrs(s, p, len);
	return to_n6(ctx, frame, hdr, len, addrs, 1);
}

/* A G-PDU whose outer headers (`o`) were read: its inner packet by the PDRs of its TEID. */
static __always_inline int uplink_gpdu(struct xdp_md *ctx, __u32 frame, const struct outer *o)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u8 *d = data + sizeof(struct ethhdr);
	__u32 hdr = o->hdr, teid = o->teid, qfi = o->qfi, len;
	int has_qfi = o->has_qfi, why, i;
	struct flow fl;
	struct session *s;
	const struct shape *sh;
	const struct pdr *p;
	__u8 *ip, addrs[12];

	s = session_of_teid(teid);
	if (!s)
		return punt();
	ip = d + (hdr & 127);
	if ((void *)(ip + 24) > end)
		return punt();
	/* IPv6 inside: for the program of its own (`xdp_engine6`), the frame as it came. */
	if (ip[0] >> 4 == 6)
		return RC_INNER6;
	len = inner_len(ip, o->total - hdr);
	if (!len)
		return punt();
	sh = shape_of(s);
	if (!sh)
		return punt();
	flow_of(ip, end, len, &fl);
	i = classify(s, sh, has_qfi, qfi, ip, &fl);
	if (i < 0)
		return drop(R_NO_MATCHING_PDR);
	p = &sh->pdrs[i & (MAX_PDRS - 1)];
	/* steps::admit: the ACL judges what comes from the UE, after classification. */
	if (p->uplink && acl_denies(ip, &fl))
		return drop(R_ACL_DENIED);
	why = verdict(p, ip[8], p->action == ACT_N6);
	if (why >= 0)
		return drop(why);
	/* The next hop before the QERs and URRs: a packet punted for want of one is policed
	 * and counted by the workers, not here too. Tunnel to tunnel (N3 to N9, N9 to N3): no
	 * routed hop. */
	if (p->action == ACT_ENCAP || p->action == ACT_ENCAP6)
		return tunnel_out(ctx, s, p, i, frame, hdr, len, has_qfi, qfi, 0, 0);
	if (p->action != ACT_N6)
		return punt(); /* the adaptor compiles no other target */
	why = next_hop(ctx, p, PORT_N6, *(__u32 *)(ip + 12), *(__u32 *)(ip + 16), ip[9], ip[1],
		       *(__u16 *)(ip + 20), *(__u16 *)(ip + 22), len, addrs);
	if (why) {
		count(why);
		return punt();
	}
	why = police(s, p, len);
	if (why >= 0)
		return drop(why);
	route_hop(ip);
	count_urrs(s, p, len);
	return to_n6(ctx, frame, hdr, len, addrs, 0);
}

static __always_inline int downlink_ip(struct xdp_md *ctx, __u32 frame)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u8 *ip = data + sizeof(struct ethhdr);
	__u32 len, ue;
	struct session *s;
	const struct shape *sh;
	const struct pdr *p;
	struct flow fl;
	int why, i;

	if ((void *)(ip + 24) > end)
		return punt();
	len = inner_len(ip, frame);
	if (!len)
		return punt();
	ue = *(__u32 *)(ip + 16);
	{
		__u32 i = bpf_ntohl(ue) & direct_mask;
		struct direct *d = bpf_map_lookup_elem(&downlink_direct, &i);
		s = d && d->used && d->key == ue ? &d->s : bpf_map_lookup_elem(&downlink, &ue);
	}
	if (!s) {
		struct route_key k = { .prefixlen = 32, .addr = ue };
		s = bpf_map_lookup_elem(&downlink_routes, &k);
	}
	if (!s)
		return punt();
	sh = shape_of(s);
	if (!sh)
		return punt();
	flow_of(ip, end, len, &fl);
	i = classify(s, sh, 0, 0, ip, &fl);
	if (i < 0)
		return drop(R_NO_MATCHING_PDR);
	p = &sh->pdrs[i & (MAX_PDRS - 1)];
	why = verdict(p, ip[8], 1);
	if (why >= 0)
		return drop(why);
	if (p->action != ACT_ENCAP && p->action != ACT_ENCAP6)
		return punt(); /* the adaptor compiles no other downlink target */
	return tunnel_out(ctx, s, p, i, frame, 0, len, 0, 0, 1, 0);
}

/* downlink_ip for an IPv6 packet: its session found by the /64 of its destination. */
static __always_inline int downlink_ip6(struct xdp_md *ctx, __u32 frame)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u8 *ip = data + sizeof(struct ethhdr);
	const struct shape *sh;
	const struct pdr *p;
	struct session *s;
	struct flow fl;
	__u64 key;
	__u32 len;
	int why, i;

	if ((void *)(ip + 48) > end)
		return punt();
	len = inner_len6(ip, frame);
	if (!len)
		return punt();
	__builtin_memcpy(&key, ip + 24, 8);
	s = bpf_map_lookup_elem(&downlink6, &key);
	if (!s)
		return punt();
	sh = shape_of(s);
	if (!sh)
		return punt();
	flow_of6(ip, &fl);
	i = classify6(s, sh, 0, 0, ip, &fl);
	if (i == -2)
		return punt();
	if (i < 0)
		return drop(R_NO_MATCHING_PDR);
	p = &sh->pdrs[i & (MAX_PDRS - 1)];
	why = verdict(p, ip[7], 1);
	if (why >= 0)
		return drop(why);
	if (p->action != ACT_ENCAP && p->action != ACT_ENCAP6)
		return punt(); /* the adaptor compiles no other downlink target */
	return tunnel_out(ctx, s, p, i, frame, 0, len, 0, 0, 1, 1);
}

static __always_inline int run(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u8 *ip = data + sizeof(*eth);
	__u32 zero = 0, *shift;
	struct outer o;
	__u32 frame;
	int rc;

	if ((void *)(ip + 24) > end)
		return punt();
	frame = (__u32)(end - (void *)ip);
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		if (!(ip[0] == 0x45 && ip[9] == 17 && *(__u32 *)(ip + 16) == n3_addr))
			return downlink_ip(ctx, frame);
		if (!gpdu4(ip, end, frame, &o))
			return punt();
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		/* Downlink IPv6: the program of its own. */
		if (!gpdu6(ip, end, frame, &o)) {
			bpf_tail_call(ctx, &engine6, 0);
			return punt();
		}
		/* An IPv6 header is 20 octets longer than an IPv4 one without options: past
		 * its first 20, the G-PDU is where an IPv4 one's would be, and runs as one (the
		 * verifier prunes its states as the IPv4 ones'). Undone for a punt. */
		shift = bpf_map_lookup_elem(&shifted, &zero);
		if (!shift || bpf_xdp_adjust_head(ctx, 20))
			return punt();
		*shift = 1;
		o.hdr -= 20;
		o.total -= 20;
		frame -= 20;
	} else {
		return punt();
	}
	rc = uplink_gpdu(ctx, frame, &o);
	shift = bpf_map_lookup_elem(&shifted, &zero);
	if (shift && *shift) {
		*shift = 0;
		if ((rc == XDP_PASS || rc == RC_INNER6) && bpf_xdp_adjust_head(ctx, -20))
			return drop(R_ENCAP_FAILED); /* cannot fail: the 20 octets were there */
	}
	/* An IPv6 inner packet: the program of its own, the frame as it came. */
	if (rc == RC_INNER6) {
		bpf_tail_call(ctx, &engine6, 0);
		return punt();
	}
	return rc;
}

/* What xdp_engine6 runs: a downlink IPv6 packet, or the IPv6 inner packet of a G-PDU (in
 * IPv4 or IPv6). */
static __always_inline int run6(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u8 *ip = data + sizeof(*eth);
	struct outer o;
	__u32 frame;

	if ((void *)(ip + 24) > end)
		return punt();
	frame = (__u32)(end - (void *)ip);
	if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		if (!gpdu6(ip, end, frame, &o))
			return downlink_ip6(ctx, frame);
	} else if (eth->h_proto != bpf_htons(ETH_P_IP) || !gpdu4(ip, end, frame, &o)) {
		return punt();
	}
	return uplink6(ctx, frame, &o);
}

/* A punt (the only XDP_PASS of run and run6): on to the steering program of the arriving
 * port, the frame as it came; XDP_PASS if there is none. */
static __always_inline int finish(struct xdp_md *ctx, int rc)
{
	__u32 ifi, *port;

	if (rc == XDP_PASS) {
		ifi = ctx->ingress_ifindex;
		port = bpf_map_lookup_elem(&ingress_port, &ifi);
		if (port)
			bpf_tail_call(ctx, &punt_to, *port);
	}
	return rc;
}

SEC("xdp")
int xdp_engine(struct xdp_md *ctx)
{
	return finish(ctx, run(ctx));
}

SEC("xdp")
int xdp_engine6(struct xdp_md *ctx)
{
	return finish(ctx, run6(ctx));
}

char LICENSE[] SEC("license") = "GPL";

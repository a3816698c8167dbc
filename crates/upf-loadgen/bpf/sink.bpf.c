/* The counting sink (see src/xdpgen/sink.rs): counts and drops IPv4 UDP packets to the ports
 * set at load, lets everything else pass; measuring latency, it also reads each counted
 * packet's stamp (inside a G-PDU with up to one extension header, or in plain IPv4/UDP), adds
 * its transit to its class's histogram (`bucket` in src/xdpgen/stats.rs) and keeps RFC 3550
 * interarrival jitter per flow (session x class, `jitter_update`); measuring gaps, it keeps the
 * longest time between two consecutive counted arrivals (`measure_gap`). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define GTPU_PORT 2152
#define MAX_PORTS 8
#define STAMP_MAGIC 0x55504c00
#define BUCKETS 1056
#define SUB_BITS 5
#define MAX_EXP 36

/* Set at load: the UDP destination ports counted (as stored in a header), whether latency and
 * gaps are measured, where a packet's session is (UE address = ue_base + session, the inner
 * destination or source), and the QFI each class's downlink G-PDUs should carry. */
const volatile __u32 n_ports = 0;
const volatile __u16 ports[MAX_PORTS] = {};
const volatile __u32 latency = 0;
const volatile __u32 gap = 0;
const volatile __u32 ue_base = 0;
const volatile __u32 ue_is_dst = 0;
const volatile __u32 sessions = 0;
const volatile __u32 has_qfi = 0;
const volatile __u32 qfi_low = 0;
const volatile __u32 qfi_high = 0;

struct count {
	__u64 packets;
	__u64 octets;
};

struct class_latency {
	__u64 count;
	__u64 sum_ns;
	__u64 max_ns;
	__u64 qfi_mismatch;
	__u64 spare[4];
	__u64 buckets[BUCKETS];
};

struct latency {
	__u32 generation;
	__u32 pad;
	__u64 negative; /* stamps later than the clock */
	__u64 spare[6];
	struct class_latency class[2];
};

/* One flow's jitter; a flow whose generation is not the map's starts over. */
struct flow {
	__u64 last_transit;
	__u64 j16; /* J x 16, ns */
	__u32 generation;
	__u32 packets;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct count);
} counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct latency);
} lat SEC(".maps");

/* The last counted arrival and the longest gap between two, ns (0: none since the reset). */
struct gap {
	__u64 last_ns;
	__u64 max_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gap);
} gaps SEC(".maps");

/* sessions x 2 entries (set at load). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct flow);
} jit SEC(".maps");

/* The histogram bucket of v ns: 0..32 one each, then 32 per power of two. */
static __always_inline __u64 bucket(__u64 v)
{
	if (v < 32)
		return v;
	__u64 e = 0, x = v;
	if (x >= 1ULL << 32) { x >>= 32; e += 32; }
	if (x >= 1ULL << 16) { x >>= 16; e += 16; }
	if (x >= 1ULL << 8) { x >>= 8; e += 8; }
	if (x >= 1ULL << 4) { x >>= 4; e += 4; }
	if (x >= 1ULL << 2) { x >>= 2; e += 2; }
	if (x >= 1ULL << 1) { x >>= 1; e += 1; }
	if (e > MAX_EXP)
		return BUCKETS - 1;
	return ((e - SUB_BITS) << 5) + (v >> (e - SUB_BITS));
}

static __always_inline void measure(void *data, void *end, __u16 dport)
{
	__u64 qfi = 0xff;
	__u8 *inner;
	if (dport == bpf_htons(GTPU_PORT)) {
		/* GTP-U at 42: 8 octets, +4 with E, S or PN, + one extension header with E. */
		__u8 *g = data + 42;
		if ((void *)(g + 16) > end)
			return;
		__u64 glen = 8;
		if (g[0] & 7) {
			glen = 12;
			if ((g[0] & 4) && g[11] != 0) {
				if (g[11] == 0x85)
					qfi = g[14] & 0x3f;
				if (g[12] == 0)
					return;
				glen += (__u64)g[12] << 2;
				/* The extension's next-type octet must end the chain. */
				__u8 *nt = g + glen - 1;
				if ((void *)(nt + 1) > end || *nt != 0)
					return;
			}
		}
		inner = g + glen;
	} else {
		inner = data + 14;
	}
	if ((void *)(inner + 40) > end)
		return;
	if (inner[0] != 0x45 || inner[9] != 17)
		return;
	__u32 cls = *(__u32 *)(inner + 36) - STAMP_MAGIC;
	if (cls > 1)
		return;
	__u64 stamp = *(__u64 *)(inner + 28);
	__u32 session = bpf_ntohl(*(__u32 *)(inner + (ue_is_dst ? 16 : 12))) - ue_base;

	__u32 zero = 0;
	struct latency *l = bpf_map_lookup_elem(&lat, &zero);
	if (!l)
		return;
	struct class_latency *c = &l->class[cls & 1];
	if (has_qfi && qfi != 0xff && qfi != (cls ? qfi_high : qfi_low))
		__sync_fetch_and_add(&c->qfi_mismatch, 1);
	__u64 now = bpf_ktime_get_ns();
	if (now < stamp) {
		__sync_fetch_and_add(&l->negative, 1);
		return;
	}
	__u64 transit = now - stamp;
	__sync_fetch_and_add(&c->count, 1);
	__sync_fetch_and_add(&c->sum_ns, transit);
	if (c->max_ns < transit)
		c->max_ns = transit;
	__u64 b = bucket(transit);
	if (b > BUCKETS - 1)
		return;
	__sync_fetch_and_add(&c->buckets[b], 1);

	/* Jitter of flow session x 2 + class (RFC 3550 A.8). */
	if (session >= sessions)
		return;
	__u32 key = session * 2 + cls;
	struct flow *f = bpf_map_lookup_elem(&jit, &key);
	if (!f)
		return;
	__u32 gen = l->generation;
	if (f->generation != gen) {
		f->last_transit = transit;
		f->j16 = 0;
		f->generation = gen;
		f->packets = 1;
		return;
	}
	__u64 last = f->last_transit;
	f->last_transit = transit;
	__u64 d = transit >= last ? transit - last : last - transit;
	__u64 j = f->j16;
	f->j16 = j + d - ((j + 8) >> 4);
	f->packets += 1;
}

/* Arrivals on two CPUs update the gap without atomics: it is a measure, not a counter. The
 * clock is read before the store, so two CPUs may store out of order: last_ns only moves
 * forward, and a race can at worst shorten or lengthen one gap by the time between two
 * arrivals that were concurrent, far below the gaps this measures. */
static __always_inline void measure_gap(void)
{
	__u32 zero = 0;
	struct gap *g = bpf_map_lookup_elem(&gaps, &zero);
	if (!g)
		return;
	__u64 now = bpf_ktime_get_ns();
	__u64 last = g->last_ns;
	if (now <= last)
		return;
	g->last_ns = now;
	if (last != 0 && now - last > g->max_ns)
		g->max_ns = now - last;
}

SEC("xdp")
int upf_sink(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	if (data + 42 > end)
		return XDP_PASS;
	__u8 *p = data;
	if (*(__u16 *)(p + 12) != bpf_htons(0x0800) || p[14] != 0x45 || p[23] != 17)
		return XDP_PASS;
	__u16 dport = *(__u16 *)(p + 36);
	int i, hit = 0;
#pragma unroll
	for (i = 0; i < MAX_PORTS; i++) {
		if (i >= n_ports)
			break;
		if (dport == ports[i]) {
			hit = 1;
			break;
		}
	}
	if (!hit)
		return XDP_PASS;
	__u32 zero = 0;
	struct count *c = bpf_map_lookup_elem(&counts, &zero);
	if (c) {
		__sync_fetch_and_add(&c->packets, 1);
		__sync_fetch_and_add(&c->octets, (__u64)(end - data));
	}
	if (gap)
		measure_gap();
	if (latency)
		measure(data, end, dport);
	return XDP_DROP;
}

char LICENSE[] SEC("license") = "Apache-2.0";

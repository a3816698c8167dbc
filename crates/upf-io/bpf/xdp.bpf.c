/* The XDP program in front of the AF_XDP sockets (see src/af_xdp/prog.rs for the rules and
 * `xdp_worker` and `xdp_group`, the references in Rust): what the UPF handles is redirected
 * into the socket of the arriving queue and its queue group, with the worker that owns its UE
 * written into the frame's metadata; everything else gets XDP_PASS. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "steer.h"

#define GTPU_PORT 2152
#define MAX_EXT 8
/* Bound on header offsets (keeps the verifier's ranges finite; beyond it: worker 0). */
#define MAX_OFF 1600
#define MAX_LOCAL 16
#define META_MAGIC 0x55504658

/* Set at load: workers steered over; 1: N3/N9 (GTP-U to a local address), 0: N6 (IP not to
 * a local address); the interface's own addresses, as stored in a header. */
const volatile __u32 workers = 1;
const volatile __u32 gtpu = 0;
const volatile __u32 n_local4 = 0;
const volatile __u32 local4[MAX_LOCAL] = {};
const volatile __u32 n_local6 = 0;
const volatile __u32 local6[MAX_LOCAL][4] = {};
/* Queue groups (seed 001): 1, or 2 to 4 with a socket each per receive queue; the group of
 * each QFI (N3/N9) and DSCP (N6), as upf_packet::classes::Classes maps them. */
const volatile __u32 groups = 1;
const volatile __u8 qfi_group[64] = {};
const volatile __u8 dscp_group[64] = {};
/* Extension headers looked at for the PDU Session Container (Classes' MAX_EXTENSIONS). */
#define CLASS_EXT 4
#define PSC_TYPE 0x85
/* The AF_XDP sockets, by receive queue × groups + group (entries set at load). */
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

static __always_inline int is_local4(__u32 a)
{
	int i;
#pragma unroll
	for (i = 0; i < MAX_LOCAL; i++) {
		if (i >= n_local4)
			break;
		if (a == local4[i])
			return 1;
	}
	return 0;
}

static __always_inline int is_local6(const __u32 *a)
{
	int i;
#pragma unroll
	for (i = 0; i < MAX_LOCAL; i++) {
		if (i >= n_local6)
			break;
		if (a[0] == local6[i][0] && a[1] == local6[i][1] && a[2] == local6[i][2] &&
		    a[3] == local6[i][3])
			return 1;
	}
	return 0;
}

/* The worker of a packet whose IP header (20 or 40 octets checked) is at ip and whose UE has
 * the steering key key (the source when up): by the UE, or by the flow for a spread UE
 * (worker 0 when its ports are cut off). */
static __always_inline __u32 steer(void *end, __u8 *ip, int v4, int up, __u64 key)
{
	if (!spread)
		return ue_worker(key, workers);
	__u64 peer, proto;
	__u8 *l4 = 0;
	if (v4) {
		__u32 k = (__u32)key;
		if (!bpf_map_lookup_elem(&spread4, &k))
			return ue_worker(key, workers);
		peer = bpf_ntohl(*(__u32 *)(ip + (up ? 16 : 12)));
		proto = ip[9];
		if (!(bpf_ntohs(*(__u16 *)(ip + 6)) & 0x1fff))
			l4 = ip + ((ip[0] & 0xf) << 2);
	} else {
		if (!bpf_map_lookup_elem(&spread6, &key))
			return ue_worker(key, workers);
		__u8 *a = ip + (up ? 24 : 8);
		peer = bpf_be64_to_cpu(*(__u64 *)a) ^ bpf_be64_to_cpu(*(__u64 *)(a + 8));
		proto = ip[6];
		l4 = ip + 40;
	}
	__u64 ports = 0;
	if (l4 && has_ports(proto)) {
		if ((void *)(l4 + 4) > end)
			return 0;
		__u64 s = bpf_ntohs(*(__u16 *)l4), d = bpf_ntohs(*(__u16 *)(l4 + 2));
		ports = up ? (s << 16 | d) : (d << 16 | s);
	}
	return hash_worker(flow_hash(key, peer, ports, proto), workers);
}

/* The owner of the GTP-U message at offset g (worker 0 when it is not a readable G-PDU) and
 * its group in *group: a G-PDU's by the QFI of a PDU Session Container among its first
 * CLASS_EXT extensions, another GTP-U message the highest, anything else the lowest. */
static __always_inline __u32 gtp_worker(void *data, void *end, __u64 g, __u32 *group)
{
	__u8 *p = data + g;
	*group = groups - 1;
	if ((void *)(p + 8) > end)
		return 0;
	__u8 flags = p[0];
	if ((flags >> 5) != 1 || !(flags & 0x10))
		return 0;
	if (p[1] != 255) {
		*group = 0;
		return 0;
	}
	__u64 off = g + 8;
	if (flags & 7) {
		if ((void *)(p + 12) > end)
			return 0;
		__u8 next = p[11];
		off = g + 12;
		if (flags & 4) {
			int i, found = groups < 2;
#pragma unroll
			for (i = 0; i < MAX_EXT; i++) {
				if (next == 0)
					break;
				__u8 *l = data + off;
				if ((void *)(l + 1) > end)
					return 0;
				if (*l == 0)
					return 0;
				__u8 type = next;
				off += (__u64)*l << 2;
				if (off > MAX_OFF)
					return 0;
				/* The next type ends the extension; opaque to clang, which would
				 * otherwise read it at a negative offset from a checked pointer. */
				__u64 at = off - 1;
				barrier_var(at);
				__u8 *n = data + at;
				if ((void *)(n + 1) > end)
					return 0;
				/* The first container; it has 4 octets at least, the QFI third. */
				if (!found && i < CLASS_EXT && type == PSC_TYPE && (void *)(l + 3) <= end) {
					found = 1;
					*group = qfi_group[l[2] & 0x3f];
				}
				next = *n;
			}
			if (next != 0)
				return 0;
		}
	}
	if (off > MAX_OFF)
		return 0;
	__u8 *in = data + off;
	if ((void *)(in + 1) > end)
		return 0;
	switch (in[0] >> 4) {
	case 4:
		if ((void *)(in + 20) > end)
			return 0;
		return steer(end, in, 1, 1, bpf_ntohl(*(__u32 *)(in + 12)));
	case 6:
		if ((void *)(in + 40) > end)
			return 0;
		return steer(end, in, 0, 1, bpf_be64_to_cpu(*(__u64 *)(in + 8)));
	default:
		return 0;
	}
}

/* Metadata [magic, worker | group << 24] in front of the frame (without room, the socket
 * recomputes), then the socket of the arriving queue's group (none there: the kernel's). */
static __always_inline int redirect(struct xdp_md *ctx, __u32 worker, __u32 group)
{
	if (bpf_xdp_adjust_meta(ctx, -8) == 0) {
		__u32 *meta = (void *)(long)ctx->data_meta;
		void *data = (void *)(long)ctx->data;
		if ((void *)(meta + 2) <= data) {
			meta[0] = META_MAGIC;
			meta[1] = worker | group << 24;
		}
	}
	return bpf_redirect_map(&xsks, ctx->rx_queue_index * groups + group, XDP_PASS);
}

SEC("xdp")
int upf_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u64 l3 = 14;

	if (data + 14 > end)
		return XDP_PASS;
	__u16 et = bpf_ntohs(*(__u16 *)(data + 12));
	if (et == 0x8100 || et == 0x88a8) {
		if (data + 18 > end)
			return XDP_PASS;
		et = bpf_ntohs(*(__u16 *)(data + 16));
		l3 = 18;
	}
	if (et == 0x0800) {
		__u8 *ip = data + l3;
		if ((void *)(ip + 20) > end)
			return XDP_PASS;
		if ((ip[0] >> 4) != 4 || (ip[0] & 0xf) < 5)
			return XDP_PASS;
		__u64 ihl = (__u64)(ip[0] & 0xf) << 2;
		__u32 dst = *(__u32 *)(ip + 16);
		if (gtpu) {
			if (bpf_ntohs(*(__u16 *)(ip + 6)) & 0x3fff)
				return XDP_PASS;
			if (!is_local4(dst) || ip[9] != 17)
				return XDP_PASS;
			__u8 *udp = data + l3 + ihl;
			if ((void *)(udp + 8) > end)
				return XDP_PASS;
			if (bpf_ntohs(*(__u16 *)(udp + 2)) != GTPU_PORT)
				return XDP_PASS;
			__u32 group;
			__u32 w = gtp_worker(data, end, l3 + ihl + 8, &group);
			return redirect(ctx, w, group);
		}
		if (ip[16] >= 224 || is_local4(dst))
			return XDP_PASS;
		return redirect(ctx, steer(end, ip, 1, 0, bpf_ntohl(dst)), dscp_group[ip[1] >> 2]);
	}
	if (et == 0x86dd) {
		__u8 *ip = data + l3;
		if ((void *)(ip + 40) > end)
			return XDP_PASS;
		if ((ip[0] >> 4) != 6)
			return XDP_PASS;
		int local = is_local6((const __u32 *)(ip + 24));
		if (gtpu) {
			if (!local || ip[6] != 17)
				return XDP_PASS;
			__u8 *udp = ip + 40;
			if ((void *)(udp + 8) > end)
				return XDP_PASS;
			if (bpf_ntohs(*(__u16 *)(udp + 2)) != GTPU_PORT)
				return XDP_PASS;
			__u32 group;
			__u32 w = gtp_worker(data, end, l3 + 48, &group);
			return redirect(ctx, w, group);
		}
		/* Multicast, link-local, local, and router/neighbour discovery: the kernel's. */
		if (ip[24] == 0xff || (ip[24] == 0xfe && (ip[25] & 0xc0) == 0x80) || local)
			return XDP_PASS;
		if (ip[6] == 58 && (void *)(ip + 41) <= end && ip[40] >= 133 && ip[40] <= 137)
			return XDP_PASS;
		__u8 dscp = ((ip[0] & 0xf) << 2) | (ip[1] >> 6);
		return redirect(ctx, steer(end, ip, 0, 0, bpf_be64_to_cpu(*(__u64 *)(ip + 24))),
				dscp_group[dscp]);
	}
	return XDP_PASS;
}

/* Passes everything: for probing what an interface supports. */
SEC("xdp")
int upf_probe(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Apache-2.0";

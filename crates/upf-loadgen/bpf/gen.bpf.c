/* The generator (see src/xdpgen/generator.rs; `Template::frame` is its specification): run by
 * BPF_PROG_RUN with live frames, it paces, rewrites every header octet of the template, then
 * the session's fields and the class marks, stamps the frame and returns XDP_TX. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define MAX_HDR 128
#define STAMP_MAGIC 0x55504c00
#define CLASS_GOLDEN 0x9e3779b9ULL
#define MARK_QFI 1
#define MARK_DSCP 2

/* The template, set at load (read-only: the verifier knows every value and keeps only the
 * code this template needs). */
const volatile __u8 hdr[MAX_HDR] __attribute__((aligned(8))) = {};
const volatile __u32 hdr_len = 0;
/* Octets the frame must have: the header and the stamp. */
const volatile __u32 need = 0;
const volatile __u32 sessions = 1;
const volatile __u32 ip_off = 0;
const volatile __u32 addr_off = 0;
const volatile __u32 addr_base = 0;
const volatile __u32 has_teid = 0;
const volatile __u32 teid_off = 0;
const volatile __u32 teid_base = 0;
/* Sum of the IPv4 header's 16-bit words but the checksum and the varying address. */
const volatile __u32 partial_sum = 0;
/* High priority: the mark (0: none), where it goes and its value; for DSCP, the difference of
 * the ToS to the template's (for the checksum). */
const volatile __u32 mark = 0;
const volatile __u32 mark_off = 0;
const volatile __u32 mark_val = 0;
const volatile __s32 mark_csum = 0;
/* Frame k is high priority iff (k * CLASS_GOLDEN) mod 2^32 < threshold. */
const volatile __u64 threshold = 0;
const volatile __u32 has_stamp = 0;
const volatile __u32 stamp_off = 0;

struct gen_state {
	__u32 session;     /* session index of the next frame */
	__u32 k;           /* frame counter (classes) */
	__u64 due_ps;      /* when the next frame is due */
	__u64 interval_ps; /* between frames; 0: not paced */
	__u64 sent;        /* runs that returned XDP_TX */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gen_state);
} state SEC(".maps");

SEC("xdp")
int upf_gen(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct gen_state *s = bpf_map_lookup_elem(&state, &zero);
	if (!s)
		return XDP_DROP;
	/* A run before its frame is due changes nothing. Late by more than 100 us (the thread
	 * was off the CPU): start over from now rather than catch up in a burst. */
	if (s->interval_ps) {
		__u64 now = bpf_ktime_get_ns() * 1000;
		__u64 due = s->due_ps;
		if (now < due)
			return XDP_DROP;
		if (!(due >= now - 100000000ULL))
			due = now;
		s->due_ps = due + s->interval_ps;
	}
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 len = hdr_len;
	if (data + need > end)
		return XDP_DROP;

	/* Every header octet, from the template. */
	int i;
#pragma unroll
	for (i = 0; i < MAX_HDR / 8; i++) {
		if (i * 8 + 8 > len)
			break;
		*(__u64 *)(data + i * 8) = *(volatile __u64 *)&hdr[i * 8];
	}
	__u32 off = len & ~7U;
	if (len & 4) {
		*(__u32 *)(data + off) = *(volatile __u32 *)&hdr[off];
		off += 4;
	}
	if (len & 2) {
		*(__u16 *)(data + off) = *(volatile __u16 *)&hdr[off];
		off += 2;
	}
	if (len & 1)
		*(__u8 *)(data + off) = hdr[off];

	s->sent += 1;
	__u32 session = s->session;
	__u32 next = session + 1;
	s->session = next < sessions ? next : 0;

	int high = 0;
	if (mark) {
		__u32 k = s->k;
		s->k = k + 1;
		high = (((__u64)k * CLASS_GOLDEN) & 0xffffffff) < threshold;
	}
	if (has_teid)
		*(__u32 *)(data + teid_off) = bpf_htonl(teid_base + session);
	__u32 addr = addr_base + session;
	*(__u32 *)(data + addr_off) = bpf_htonl(addr);

	/* IPv4 header checksum: the fixed words, the address's halves, a DSCP mark's
	 * difference; folded, inverted. */
	__u64 sum = (__u64)partial_sum + (addr >> 16) + (addr & 0xffff);
	if (high) {
		*(__u8 *)(data + mark_off) = mark_val;
		if (mark == MARK_DSCP)
			sum += (__s64)mark_csum;
	}
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	*(__u16 *)(data + ip_off + 10) = bpf_htons((__u16)(sum ^ 0xffff));

	/* The class word, then the clock as late as possible. */
	if (has_stamp) {
		*(__u32 *)(data + stamp_off + 8) = STAMP_MAGIC + high;
		*(__u64 *)(data + stamp_off) = bpf_ktime_get_ns();
	}
	return XDP_TX;
}

char LICENSE[] SEC("license") = "Apache-2.0";

/* The generator (see src/xdpgen/generator.rs; `Template::frame` is its specification): run by
 * BPF_PROG_RUN with live frames, it paces, rewrites every header octet of the template, then
 * the session's fields and the class marks, stamps the frame and returns XDP_TX. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define MAX_HDR 128
#define STAMP_MAGIC 0x55504c00
#define CLASS_GOLDEN 0x9e3779b9ULL
#define MARK_DSCP 2

/* The template, set at load (read-only: the verifier knows every value and keeps only the
 * code this template needs). cfg[] is indexed by the CFG_ names below (u64 each, the order of
 * `GenConfig` in generator.rs). */
enum {
	CFG_HDR_LEN,     /* header octets rewritten from hdr[] */
	CFG_NEED,        /* octets the frame must have: the header and the stamp */
	CFG_SESSIONS,
	CFG_IP_OFF,      /* the IPv4 header whose address varies */
	CFG_ADDR_OFF,    /* that address */
	CFG_ADDR_BASE,
	CFG_HAS_TEID,
	CFG_TEID_OFF,
	CFG_TEID_BASE,
	CFG_PARTIAL_SUM, /* the IPv4 header's words but the checksum and the address */
	CFG_MARK,        /* high priority: 0 none, 1 QFI, 2 DSCP */
	CFG_MARK_OFF,
	CFG_MARK_VAL,
	CFG_MARK_CSUM,   /* DSCP: the ToS's difference to the template's (two's complement) */
	CFG_THRESHOLD,   /* frame k is high iff (k * CLASS_GOLDEN) mod 2^32 < threshold */
	CFG_HAS_STAMP,
	CFG_STAMP_OFF,
	CFG_WORDS,
};
const volatile __u64 cfg[CFG_WORDS] = {};
const volatile __u64 hdr[MAX_HDR / 8] = {};

/* The state the host reads and sets (the .bss map): direct access, no lookup per frame. */
struct gen_state {
	__u32 session;     /* session index of the next frame */
	__u32 k;           /* frame counter (classes) */
	__u64 due_ps;      /* when the next frame is due */
	__u64 interval_ps; /* between frames; 0: not paced */
	__u64 sent;        /* runs that returned XDP_TX */
} state = {};

#define COPY(i) \
	case (i) + 1: \
		*(__u64 *)(data + (i) * 8) = h[(i)]
#define TAIL(T, o) (*(T *)(data + (o)) = *(const volatile T *)((const volatile __u8 *)h + (o)))

SEC("xdp")
int upf_gen(struct xdp_md *ctx)
{
	/* The globals' addresses in registers (opaque to clang, which would otherwise load each
	 * address again before every access). */
	struct gen_state *s = &state;
	const volatile __u64 *c = cfg;
	barrier_var(s);
	barrier_var(c);
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
	if (data + c[CFG_NEED] > end)
		return XDP_DROP;

	/* Every header octet, from the template: whole words, then the rest. */
	const volatile __u64 *h = hdr;
	barrier_var(h);
	__u64 len = c[CFG_HDR_LEN];
	switch (len >> 3) {
		COPY(15); /* fall through */
		COPY(14); /* fall through */
		COPY(13); /* fall through */
		COPY(12); /* fall through */
		COPY(11); /* fall through */
		COPY(10); /* fall through */
		COPY(9); /* fall through */
		COPY(8); /* fall through */
		COPY(7); /* fall through */
		COPY(6); /* fall through */
		COPY(5); /* fall through */
		COPY(4); /* fall through */
		COPY(3); /* fall through */
		COPY(2); /* fall through */
		COPY(1); /* fall through */
		COPY(0); /* fall through */
	default:
		break;
	}
	__u64 off = len & ~7ULL;
	if (len & 4) {
		TAIL(__u32, off);
		off += 4;
	}
	if (len & 2) {
		TAIL(__u16, off);
		off += 2;
	}
	if (len & 1)
		TAIL(__u8, off);

	s->sent += 1;
	__u64 session = s->session;
	__u64 next = session + 1;
	s->session = next < c[CFG_SESSIONS] ? next : 0;

	__u64 high = 0;
	if (c[CFG_MARK]) {
		__u32 k = s->k;
		s->k = k + 1;
		high = (((__u64)k * CLASS_GOLDEN) & 0xffffffff) < c[CFG_THRESHOLD];
	}
	if (c[CFG_HAS_TEID])
		*(__u32 *)(data + c[CFG_TEID_OFF]) = bpf_htonl((__u32)c[CFG_TEID_BASE] + session);
	__u32 addr = (__u32)c[CFG_ADDR_BASE] + session;
	*(__u32 *)(data + c[CFG_ADDR_OFF]) = bpf_htonl(addr);

	/* IPv4 header checksum: the fixed words, the address's halves, a DSCP mark's
	 * difference; folded, inverted. */
	__u64 sum = c[CFG_PARTIAL_SUM] + (addr >> 16) + (addr & 0xffff);
	if (high) {
		*(__u8 *)(data + c[CFG_MARK_OFF]) = c[CFG_MARK_VAL];
		if (c[CFG_MARK] == MARK_DSCP)
			sum += c[CFG_MARK_CSUM];
	}
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	*(__u16 *)(data + c[CFG_IP_OFF] + 10) = bpf_htons((__u16)(sum ^ 0xffff));

	/* The class word, then the clock as late as possible. */
	if (c[CFG_HAS_STAMP]) {
		void *stamp = data + c[CFG_STAMP_OFF];
		*(__u32 *)(stamp + 8) = STAMP_MAGIC + high;
		*(__u64 *)stamp = bpf_ktime_get_ns();
	}
	return XDP_TX;
}

char LICENSE[] SEC("license") = "Apache-2.0";

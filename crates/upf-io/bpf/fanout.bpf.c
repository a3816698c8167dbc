/* PACKET_FANOUT_EBPF: returns the member of the fanout group that receives a packet,
 * worker * groups + group: the worker that owns its UE and its queue group (see
 * src/fanout/mod.rs for the rules and `fanout_member`, the reference in Rust).
 *
 * The packet is read with the legacy LD_ABS/LD_IND loads, each checked against skb->len
 * first (an unchecked one past the end would end the program with 0, group 0 included): a
 * read outside the packet sends it to worker 0, and the reference treats every out-of-range
 * read the same way; the group is computed apart, a read outside the packet making it the
 * lowest, as upf_packet::classes does. On receive the packet starts at the network header
 * and skb->protocol is the EtherType with VLAN tags taken off; BPF_PROG_TEST_RUN starts after
 * the Ethernet header with a tag still in place, so one 802.1Q/802.1ad tag is skipped too. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "steer.h"

#define GTPU_PORT 2152
#define MAX_EXT 8

/* Set at load: workers steered over, and what the group receives (1: GTP-U on N3/N9, by the
 * inner source; 0: plain IP on N6, by the destination). */
const volatile __u32 workers = 1;
const volatile __u32 gtpu = 0;
/* Queue groups (seed 001): 1, or 2 to 4 fanout members per worker; the group of each QFI
 * (N3/N9) and DSCP (N6), as upf_packet::classes::Classes maps them. */
const volatile __u32 groups = 1;
const volatile __u8 qfi_group[64] = {};
const volatile __u8 dscp_group[64] = {};
/* Extension headers looked at for the PDU Session Container (Classes' MAX_EXTENSIONS). */
#define CLASS_EXT 4
#define PSC_TYPE 0x85
unsigned long long load_byte(void *skb, unsigned long long off) asm("llvm.bpf.load.byte");
unsigned long long load_half(void *skb, unsigned long long off) asm("llvm.bpf.load.half");
unsigned long long load_word(void *skb, unsigned long long off) asm("llvm.bpf.load.word");

/* The packet and whether a read fell outside it (then the read gives 0). */
struct pkt {
	struct __sk_buff *skb;
	__u64 len;
	int bad;
};

static __always_inline __u64 rd8(struct pkt *p, __u64 off)
{
	if (off + 1 > p->len) {
		p->bad = 1;
		return 0;
	}
	return load_byte(p->skb, off);
}

static __always_inline __u64 rd16(struct pkt *p, __u64 off)
{
	if (off + 2 > p->len) {
		p->bad = 1;
		return 0;
	}
	return load_half(p->skb, off);
}

static __always_inline __u64 rd32(struct pkt *p, __u64 off)
{
	if (off + 4 > p->len) {
		p->bad = 1;
		return 0;
	}
	return load_word(p->skb, off);
}

/* The worker of a packet whose IP header (version checked) is at ip and whose UE has the
 * steering key key (the source when up): by the UE, or by the flow for a spread UE. */
static __always_inline __u32 steer(struct pkt *p, __u64 ip, int v4, int up, __u64 key)
{
	if (!spread)
		return ue_worker(key, workers);
	__u64 peer, proto, l4 = 0;
	if (v4) {
		__u32 k = (__u32)key;
		if (!bpf_map_lookup_elem(&spread4, &k))
			return ue_worker(key, workers);
		peer = rd32(p, ip + (up ? 16 : 12));
		proto = rd8(p, ip + 9);
		if (!(rd16(p, ip + 6) & 0x1fff))
			l4 = ip + ((rd8(p, ip) & 0xf) << 2);
	} else {
		if (!bpf_map_lookup_elem(&spread6, &key))
			return ue_worker(key, workers);
		__u64 o = ip + (up ? 24 : 8);
		peer = (rd32(p, o) << 32 | rd32(p, o + 4)) ^ (rd32(p, o + 8) << 32 | rd32(p, o + 12));
		proto = rd8(p, ip + 6);
		l4 = ip + 40;
	}
	__u64 ports = 0;
	if (l4 && has_ports(proto)) {
		__u64 s = rd16(p, l4), d = rd16(p, l4 + 2);
		ports = up ? (s << 16 | d) : (d << 16 | s);
	}
	return hash_worker(flow_hash(key, peer, ports, proto), workers);
}

/* The worker of the packet whose network header is at l3 with EtherType proto (one tag
 * skipped); 0 for what it cannot read (p->bad then set: the caller makes it 0 too). */
static __always_inline __u32 worker(struct pkt *p, __u64 l3, __u64 proto)
{
	__u64 key;

	if (proto == 0x8100 || proto == 0x88a8)
		proto = rd16(p, 2);
	if (proto != 0x0800 && proto != 0x86dd)
		return 0;
	int v4 = proto == 0x0800;

	if (!gtpu) {
		if (v4) {
			if (rd8(p, l3) >> 4 != 4)
				return 0;
			key = rd32(p, l3 + 16);
		} else {
			if (rd8(p, l3) >> 4 != 6)
				return 0;
			key = rd32(p, l3 + 24) << 32;
			key |= rd32(p, l3 + 28);
		}
		return steer(p, l3, v4, 0, key);
	}

	/* Outer IPv4 (version, IHL >= 5, UDP, first fragment) or IPv6 (next header UDP). */
	__u64 udp;
	if (v4) {
		__u64 vihl = rd8(p, l3);
		if (vihl >> 4 != 4)
			return 0;
		__u64 ihl = (vihl & 0xf) << 2;
		if (ihl < 20)
			return 0;
		if (rd8(p, l3 + 9) != 17)
			return 0;
		if (rd16(p, l3 + 6) & 0x1fff)
			return 0;
		udp = l3 + ihl;
	} else {
		if (rd8(p, l3) >> 4 != 6)
			return 0;
		if (rd8(p, l3 + 6) != 17)
			return 0;
		udp = l3 + 40;
	}
	/* UDP to 2152, a G-PDU (version 1, PT 1, type 255). */
	if (rd16(p, udp + 2) != GTPU_PORT)
		return 0;
	__u64 gtp = udp + 8;
	__u64 flags = rd8(p, gtp);
	if ((flags & 0xf0) != 0x30)
		return 0;
	if (rd8(p, gtp + 1) != 255)
		return 0;
	__u64 inner;
	if ((flags & 0x07) == 0) {
		inner = gtp + 8;
	} else if ((flags & 0x04) == 0) {
		inner = gtp + 12;
	} else {
		/* Extension headers: the next type is the octet before the cursor. */
		__u64 cur = gtp + 12;
		int i;
#pragma unroll
		for (i = 0; i < MAX_EXT; i++) {
			if (rd8(p, cur - 1) == 0)
				goto ext_done;
			__u64 len = rd8(p, cur);
			if (len == 0)
				return 0;
			cur += len << 2;
		}
		if (rd8(p, cur - 1) != 0)
			return 0;
ext_done:
		inner = cur;
	}
	/* The inner packet's source address (and, for a spread UE, its flow). */
	switch (rd8(p, inner) >> 4) {
	case 4:
		key = rd32(p, inner + 12);
		return steer(p, inner, 1, 1, key);
	case 6:
		key = rd32(p, inner + 8) << 32;
		key |= rd32(p, inner + 12);
		return steer(p, inner, 0, 1, key);
	default:
		return 0;
	}
}

/* The queue group of the IP packet at l3, as Classes::group_of_ip gives it: on N3/N9 a
 * G-PDU's by the QFI of the first PDU Session Container among its first CLASS_EXT extension
 * headers (each wholly inside the packet), another GTP-U message the highest; on N6 by the
 * DSCP; anything else, and any read outside the packet, the lowest. */
static __always_inline __u32 group(struct pkt *p, __u64 l3)
{
	__u32 lowest = groups - 1;
	__u64 v = rd8(p, l3);
	if (!gtpu) {
		__u64 dscp;
		if (v >> 4 == 4 && l3 + 20 <= p->len)
			dscp = rd8(p, l3 + 1) >> 2;
		else if (v >> 4 == 6 && l3 + 40 <= p->len)
			dscp = ((v & 0xf) << 2) | (rd8(p, l3 + 1) >> 6);
		else
			return lowest;
		return p->bad ? lowest : dscp_group[dscp & 0x3f];
	}
	__u64 udp;
	if (v >> 4 == 4) {
		udp = (v & 0xf) << 2;
		if (udp < 20 || rd8(p, l3 + 9) != 17)
			return lowest;
	} else if (v >> 4 == 6) {
		if (rd8(p, l3 + 6) != 17)
			return lowest;
		udp = 40;
	} else {
		return lowest;
	}
	__u64 g = l3 + udp + 8;
	/* Version 1, protocol type GTP, the 8-octet header there. */
	if (g + 8 > p->len)
		return lowest;
	__u64 flags = rd8(p, g);
	if ((flags & 0xf0) != 0x30 || p->bad)
		return lowest;
	if (rd8(p, g + 1) != 255)
		return p->bad ? lowest : 0;
	if (!(flags & 0x04))
		return lowest;
	__u64 next = rd8(p, g + 11);
	__u64 at = g + 12;
	int i;
#pragma unroll
	for (i = 0; i < CLASS_EXT; i++) {
		if (next == 0 || p->bad)
			return lowest;
		__u64 len = rd8(p, at) << 2;
		if (len == 0 || at + len > p->len || p->bad)
			return lowest;
		/* Octet 2 of the container: the QFI in its low 6 bits (TS 38.415). */
		if (next == PSC_TYPE)
			return qfi_group[rd8(p, at + 2) & 0x3f];
		next = rd8(p, at + len - 1);
		at += len;
	}
	return lowest;
}

SEC("socket")
int upf_fanout(struct __sk_buff *skb)
{
	__u64 proto = bpf_ntohs((__u16)skb->protocol);
	__u64 l3 = (proto == 0x8100 || proto == 0x88a8) ? 4 : 0;
	struct pkt p = { .skb = skb, .len = skb->len, .bad = 0 };
	__u32 w = worker(&p, l3, proto);
	if (p.bad)
		w = 0;
	if (groups < 2)
		return w;
	struct pkt q = { .skb = skb, .len = skb->len, .bad = 0 };
	return w * groups + group(&q, l3);
}

char LICENSE[] SEC("license") = "GPL";

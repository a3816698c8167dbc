/* PACKET_FANOUT_EBPF: returns the index of the worker that owns a packet's UE (see
 * src/fanout.rs for the rules and `fanout_worker`, the reference in Rust).
 *
 * The packet is read with the legacy LD_ABS/LD_IND loads, which end the program with 0 when a
 * read falls outside the packet: that is "unparsable goes to worker 0", and the reference
 * treats every out-of-range read the same way. On receive the packet starts at the network
 * header and skb->protocol is the EtherType with VLAN tags taken off; BPF_PROG_TEST_RUN
 * starts after the Ethernet header with a tag still in place, so one 802.1Q/802.1ad tag is
 * skipped too. */
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
unsigned long long load_byte(void *skb, unsigned long long off) asm("llvm.bpf.load.byte");
unsigned long long load_half(void *skb, unsigned long long off) asm("llvm.bpf.load.half");
unsigned long long load_word(void *skb, unsigned long long off) asm("llvm.bpf.load.word");

/* The worker of a packet whose IP header (version checked) is at ip and whose UE has the
 * steering key key (the source when up): by the UE, or by the flow for a spread UE. */
static __always_inline __u32 steer(struct __sk_buff *skb, __u64 ip, int v4, int up, __u64 key)
{
	if (!spread)
		return ue_worker(key, workers);
	__u64 peer, proto, l4 = 0;
	if (v4) {
		__u32 k = (__u32)key;
		if (!bpf_map_lookup_elem(&spread4, &k))
			return ue_worker(key, workers);
		peer = load_word(skb, ip + (up ? 16 : 12));
		proto = load_byte(skb, ip + 9);
		if (!(load_half(skb, ip + 6) & 0x1fff))
			l4 = ip + ((load_byte(skb, ip) & 0xf) << 2);
	} else {
		if (!bpf_map_lookup_elem(&spread6, &key))
			return ue_worker(key, workers);
		__u64 o = ip + (up ? 24 : 8);
		peer = (load_word(skb, o) << 32 | load_word(skb, o + 4)) ^
		       (load_word(skb, o + 8) << 32 | load_word(skb, o + 12));
		proto = load_byte(skb, ip + 6);
		l4 = ip + 40;
	}
	__u64 ports = 0;
	if (l4 && has_ports(proto)) {
		__u64 s = load_half(skb, l4), d = load_half(skb, l4 + 2);
		ports = up ? (s << 16 | d) : (d << 16 | s);
	}
	return hash_worker(flow_hash(key, peer, ports, proto), workers);
}

SEC("socket")
int upf_fanout(struct __sk_buff *skb)
{
	__u64 proto = bpf_ntohs((__u16)skb->protocol);
	__u64 l3 = 0, key;

	if (proto == 0x8100 || proto == 0x88a8) {
		proto = load_half(skb, 2);
		l3 = 4;
	}
	if (proto != 0x0800 && proto != 0x86dd)
		return 0;
	int v4 = proto == 0x0800;

	if (!gtpu) {
		if (v4) {
			if (load_byte(skb, l3) >> 4 != 4)
				return 0;
			key = load_word(skb, l3 + 16);
		} else {
			if (load_byte(skb, l3) >> 4 != 6)
				return 0;
			key = load_word(skb, l3 + 24) << 32;
			key |= load_word(skb, l3 + 28);
		}
		return steer(skb, l3, v4, 0, key);
	}

	/* Outer IPv4 (version, IHL >= 5, UDP, first fragment) or IPv6 (next header UDP). */
	__u64 udp;
	if (v4) {
		__u64 vihl = load_byte(skb, l3);
		if (vihl >> 4 != 4)
			return 0;
		__u64 ihl = (vihl & 0xf) << 2;
		if (ihl < 20)
			return 0;
		if (load_byte(skb, l3 + 9) != 17)
			return 0;
		if (load_half(skb, l3 + 6) & 0x1fff)
			return 0;
		udp = l3 + ihl;
	} else {
		if (load_byte(skb, l3) >> 4 != 6)
			return 0;
		if (load_byte(skb, l3 + 6) != 17)
			return 0;
		udp = l3 + 40;
	}
	/* UDP to 2152, a G-PDU (version 1, PT 1, type 255). */
	if (load_half(skb, udp + 2) != GTPU_PORT)
		return 0;
	__u64 gtp = udp + 8;
	__u64 flags = load_byte(skb, gtp);
	if ((flags & 0xf0) != 0x30)
		return 0;
	if (load_byte(skb, gtp + 1) != 255)
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
			if (load_byte(skb, cur - 1) == 0)
				goto ext_done;
			__u64 len = load_byte(skb, cur);
			if (len == 0)
				return 0;
			cur += len << 2;
		}
		if (load_byte(skb, cur - 1) != 0)
			return 0;
ext_done:
		inner = cur;
	}
	/* The inner packet's source address (and, for a spread UE, its flow). */
	switch (load_byte(skb, inner) >> 4) {
	case 4:
		key = load_word(skb, inner + 12);
		return steer(skb, inner, 1, 1, key);
	case 6:
		key = load_word(skb, inner + 8) << 32;
		key |= load_word(skb, inner + 12);
		return steer(skb, inner, 0, 1, key);
	default:
		return 0;
	}
}

char LICENSE[] SEC("license") = "GPL";

/* The UE steering hash of upf_packet::steer, for the BPF programs: the key of a UE address is
 * the IPv4 address as a number, or the upper 64 bits of the IPv6 address; the hash is the upper
 * half of key * 2^64/phi; the worker of n is (hash * n) >> 32. The programs' tests compare
 * them with the Rust functions. */
#ifndef UPF_STEER_H
#define UPF_STEER_H

#include <linux/types.h>

#define UE_HASH_GOLDEN 0x9E3779B97F4A7C15ULL

static __always_inline __u32 ue_hash_key(__u64 key)
{
	return (__u32)((key * UE_HASH_GOLDEN) >> 32);
}

static __always_inline __u32 ue_worker(__u64 key, __u32 n)
{
	return (__u32)(((__u64)ue_hash_key(key) * n) >> 32);
}

/* The flow hash of a spread UE's packet (upf_packet::steer::flow_hash_key): ports is
 * ue_port << 16 | peer_port. */
static __always_inline __u32 flow_hash(__u64 ue, __u64 peer, __u64 ports, __u64 proto)
{
	__u64 h = ue ^ ((peer << 23) | (peer >> 41)) ^ (ports << 32 | proto);
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return (__u32)(h >> 32);
}

static __always_inline __u32 hash_worker(__u32 hash, __u32 n)
{
	return (__u32)(((__u64)hash * n) >> 32);
}

static __always_inline int has_ports(__u64 proto)
{
	return proto == 6 || proto == 17 || proto == 132;
}

/* Spread UEs (peak-rate UEs steered per flow), by steering key; filled at load. */
#define MAX_SPREAD 1024

/* The spread UEs, filled at load from [workers] spread_ues: IPv4 addresses (spread4) and IPv6
 * /64s (spread6) whose packets are steered by flow. Each program that includes this header
 * has its own; `spread` is 1 when they hold any UE (0: no lookup at all). Needs
 * <bpf/bpf_helpers.h> included first. */
const volatile __u32 spread = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_SPREAD);
	__type(key, __u32);
	__type(value, __u8);
} spread4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_SPREAD);
	__type(key, __u64);
	__type(value, __u8);
} spread6 SEC(".maps");

#endif

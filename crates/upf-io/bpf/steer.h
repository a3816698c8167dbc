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

#endif

/* Returns the verdict set at load (XDP_PASS lets a veth accept redirected frames and hand
 * them to the kernel; XDP_DROP). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

const volatile __u32 verdict = XDP_PASS;

SEC("xdp")
int upf_verdict(struct xdp_md *ctx)
{
	return verdict;
}

char LICENSE[] SEC("license") = "Apache-2.0";

/*
 * The v2 device rules as a BPF_PROG_TYPE_CGROUP_DEVICE program, assembled
 * here instruction by instruction and loaded with the raw bpf(2) call: no
 * libbpf, no compiler, a dozen instructions per rule. The program sees
 * struct bpf_cgroup_dev_ctx (access_type = access << 16 | type, major,
 * minor) and returns 1 to allow, 0 to deny:
 *
 *     if (access & MKNOD) return 0;
 *     for each rule: if (type == T && major == M && minor == m) return 1;
 *     return 0;
 *
 * Once attached the program stays with the cgroup until it is removed, so
 * its file descriptor is closed at once.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The verifier's log for a refused program. */
#define LOG_SIZE 4096

static struct bpf_insn insn(__u8 code, __u8 dst, __u8 src, __s16 off,
			    __s32 imm)
{
	struct bpf_insn i;

	memset(&i, 0, sizeof(i));
	i.code = code;
	i.dst_reg = dst;
	i.src_reg = src;
	i.off = off;
	i.imm = imm;
	return i;
}

#define LOAD_U32(dst, field)                                                  \
	insn(BPF_LDX | BPF_MEM | BPF_W, dst, BPF_REG_1,                       \
	     offsetof(struct bpf_cgroup_dev_ctx, field), 0)
#define JNE(dst, imm, off) insn(BPF_JMP | BPF_JNE | BPF_K, dst, 0, off, imm)

/* Assemble the program for rules into out (room for 8 + 5 per rule). */
static size_t assemble(const struct cg_dev_rule *rules, size_t n,
		       struct bpf_insn *out)
{
	size_t k = 0;

	out[k++] = LOAD_U32(BPF_REG_2, access_type);
	out[k++] = insn(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_5, BPF_REG_2, 0, 0);
	out[k++] = insn(BPF_ALU64 | BPF_AND | BPF_K, BPF_REG_2, 0, 0, 0xffff);
	out[k++] = insn(BPF_ALU64 | BPF_RSH | BPF_K, BPF_REG_5, 0, 0, 16);
	out[k++] = LOAD_U32(BPF_REG_3, major);
	out[k++] = LOAD_U32(BPF_REG_4, minor);
	/* mknod is never allowed: jump to the final "return 0" */
	out[k++] = insn(BPF_JMP | BPF_JSET | BPF_K, BPF_REG_5, 0,
			0, BPF_DEVCG_ACC_MKNOD);
	{
		size_t mknod_jump = k - 1;
		for (size_t i = 0; i < n; i++) {
			bool any = rules[i].minor < 0;
			int type = rules[i].type == 'b' ? BPF_DEVCG_DEV_BLOCK
							: BPF_DEVCG_DEV_CHAR;
			/* Each test skips the rest of the rule on mismatch. */
			out[k++] = JNE(BPF_REG_2, type, any ? 3 : 4);
			out[k++] = JNE(BPF_REG_3, (__s32)rules[i].major,
				       any ? 2 : 3);
			if (!any)
				out[k++] = JNE(BPF_REG_4, rules[i].minor, 2);
			out[k++] = insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0,
					0, 0, 1);
			out[k++] = insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0);
		}
		out[mknod_jump].off = (__s16)(k - mknod_jump - 1);
	}
	out[k++] = insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0);
	out[k++] = insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0);
	return k;
}

int cg_bpf_devices(const char *dir, const struct cg_dev_rule *rules,
		   size_t n, struct kn_error *err)
{
	struct bpf_insn *prog = kn_xcalloc(9 + 5 * n, sizeof(*prog));
	char *log = kn_xcalloc(1, LOG_SIZE);
	union bpf_attr attr;
	int prog_fd = -1, dir_fd = -1, rc = 0;
	size_t len = assemble(rules, n, prog);

	memset(&attr, 0, sizeof(attr));
	attr.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
	attr.insns = (__u64)(uintptr_t)prog;
	attr.insn_cnt = (__u32)len;
	attr.license = (__u64)(uintptr_t) "MIT";
	attr.log_buf = (__u64)(uintptr_t)log;
	attr.log_size = LOG_SIZE;
	attr.log_level = 1;
	prog_fd = (int)syscall(SYS_bpf, BPF_PROG_LOAD, &attr, sizeof(attr));
	if (prog_fd < 0) {
		rc = kn_errorf(err, KN_EIO, NULL, "cannot load the device "
			       "program for %s: %s%s%.200s", dir, strerror(errno),
			       log[0] ? ": " : "", log);
		goto out;
	}
	dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir_fd < 0) {
		rc = kn_errorf(err, KN_EIO, NULL, "cannot open cgroup %s: %s", dir,
			       strerror(errno));
		goto out;
	}
	memset(&attr, 0, sizeof(attr));
	attr.target_fd = (__u32)dir_fd;
	attr.attach_bpf_fd = (__u32)prog_fd;
	attr.attach_type = BPF_CGROUP_DEVICE;
	if (syscall(SYS_bpf, BPF_PROG_ATTACH, &attr, sizeof(attr)) < 0)
		rc = kn_errorf(err, KN_EIO, NULL, "cannot attach the device "
			       "program to cgroup %s: %s", dir, strerror(errno));
out:
	if (dir_fd >= 0)
		close(dir_fd);
	if (prog_fd >= 0)
		close(prog_fd);
	KN_FREE_ALL(log, prog);
	return rc;
}

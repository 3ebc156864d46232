/**
 * @module services/sandbox/seccomp
 * The seccomp filter bubblewrap installs for a bash call without the network grant: it refuses
 * to create unix-domain sockets and io_uring instances, and kills a process that makes system
 * calls through a foreign ABI.
 *
 * Why: a read-only mount does not stop `connect()` on a socket file, so without this a command
 * could talk to any unix socket it can see (a Postgres socket directory, `docker.sock`, the
 * session bus under `/run/user`), which is the same reach the network grant is about. A socket
 * cannot be opened without `socket()`, and the filter sees its first argument (the domain), so
 * refusing `socket(AF_UNIX, …)` closes every path-named and abstract unix socket at once.
 * `socketpair()` stays allowed: its sockets have no name and reach only the command itself.
 * io_uring can create sockets without the `socket()` system call, so it is refused as a whole
 * (as container runtimes do). A 32-bit process on a 64-bit kernel would reach sockets through
 * `socketcall()`, whose arguments the filter cannot read, so any system call from another ABI
 * (i386, x32) kills the process.
 *
 * The program is classic BPF (struct sock_filter, 8 bytes each, host byte order), built here
 * rather than with libseccomp so the runtime needs no native module.
 */

/** struct seccomp_data offsets. */
const NR = 0;
const ARCH = 4;
const ARG0 = 16; // The low 32 bits on little-endian hosts, which are the ones `int domain` uses.

/** BPF opcodes. */
const LD_W_ABS = 0x20;
const JEQ_K = 0x15;
const JGE_K = 0x35;
const RET_K = 0x06;

/** seccomp return values. */
const RET_KILL_PROCESS = 0x80000000;
const RET_ALLOW = 0x7fff0000;
const RET_ERRNO = 0x00050000;
const EPERM = 1;

const AF_UNIX = 1;
/** The x32 ABI marks its system call numbers with this bit. */
const X32_SYSCALL_BIT = 0x40000000;
/** io_uring_setup, io_uring_enter, io_uring_register: the same numbers on x86_64 and arm64. */
const IO_URING = [425, 426, 427] as const;

interface Abi {
  /** AUDIT_ARCH_* of the native ABI. */
  auditArch: number;
  /** __NR_socket. */
  socket: number;
}

const ABIS: Partial<Record<NodeJS.Architecture, Abi>> = {
  x64: { auditArch: 0xc000003e, socket: 41 },
  arm64: { auditArch: 0xc00000b7, socket: 198 },
};

/** Whether this host's architecture has a filter (bash runs without one elsewhere; docs/security.md). */
export function seccompSupported(arch: NodeJS.Architecture = process.arch): boolean {
  return ABIS[arch] !== undefined && isLittleEndian();
}

function isLittleEndian(): boolean {
  return new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
}

type Instruction = [code: number, jt: number, jf: number, k: number];

/**
 * The filter program for `arch`, as bubblewrap's `--seccomp FD` reads it. Throws for an
 * architecture without one; check `seccompSupported` first.
 */
export function noUnixSocketsFilter(arch: NodeJS.Architecture = process.arch): Buffer {
  const abi = ABIS[arch];
  if (!abi || !isLittleEndian()) throw new Error(`no seccomp filter for the ${arch} architecture`);
  // Index of the two final instructions, the targets of the jumps below (offsets are relative).
  const program: Instruction[] = [];
  const ALLOW = 11;
  const DENY = 12;
  const jumpTo = (target: number) => target - (program.length + 1);
  program.push([LD_W_ABS, 0, 0, ARCH]);
  program.push([JEQ_K, 1, 0, abi.auditArch]);
  program.push([RET_K, 0, 0, RET_KILL_PROCESS]);
  program.push([LD_W_ABS, 0, 0, NR]);
  program.push([JGE_K, jumpTo(DENY), 0, X32_SYSCALL_BIT]);
  for (const nr of IO_URING) program.push([JEQ_K, jumpTo(DENY), 0, nr]);
  program.push([JEQ_K, 0, jumpTo(ALLOW), abi.socket]);
  program.push([LD_W_ABS, 0, 0, ARG0]);
  program.push([JEQ_K, jumpTo(DENY), jumpTo(ALLOW), AF_UNIX]);
  if (program.length !== ALLOW) throw new Error('seccomp program layout changed; fix the jump targets');
  program.push([RET_K, 0, 0, RET_ALLOW]);
  program.push([RET_K, 0, 0, RET_ERRNO | EPERM]);
  const out = Buffer.alloc(program.length * 8);
  program.forEach(([code, jt, jf, k], i) => {
    out.writeUInt16LE(code, i * 8);
    out.writeUInt8(jt, i * 8 + 2);
    out.writeUInt8(jf, i * 8 + 3);
    out.writeUInt32LE(k >>> 0, i * 8 + 4);
  });
  return out;
}

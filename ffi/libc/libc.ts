/**
 * The libc binding: POSIX shared memory (`shm_open`, `ftruncate`, `posix_fallocate`, `mmap`, `mremap`),
 * process liveness (`kill`, `getpid`), futex waits and wakes (`syscall`), `sched_yield`, reads and writes of
 * inherited descriptors that Deno cannot wrap in a stream (`poll`, `read`, `write`, `socketpair`: a
 * launcher's PMI socket), and errno. This is the only place in the project that opens libc, and it opens it
 * on first use, so importing the module needs no `--allow-ffi`.
 *
 * Every wrapper turns a failed call into a {@linkcode LibcError} that names the call and says errno in
 * words (`shm_open("/dcomm-x") failed: EEXIST (File exists)`).
 *
 * @module
 */
import { DistError, type DistErrorOptions, UnsupportedError } from "../../core/errors.ts";
import { type LibrarySpec, openLibrary } from "../locate.ts";

/** The symbols bound from libc, with their C declarations. */
export const LIBC_SYMBOLS = {
  shm_open: {
    // int shm_open(const char *name, int oflag, mode_t mode);
    parameters: [
      "buffer", // const char *name (NUL-terminated)
      "i32", // int oflag
      "u32", // mode_t mode
    ],
    result: "i32",
  },
  shm_unlink: {
    // int shm_unlink(const char *name);
    parameters: [
      "buffer", // const char *name (NUL-terminated)
    ],
    result: "i32",
  },
  ftruncate: {
    // int ftruncate(int fd, off_t length);
    parameters: [
      "i32", // int fd
      "i64", // off_t length
    ],
    result: "i32",
  },
  mmap: {
    // void *mmap(void *addr, size_t length, int prot, int flags, int fd, off_t offset);
    parameters: [
      "pointer", // void *addr
      "usize", // size_t length
      "i32", // int prot
      "i32", // int flags
      "i32", // int fd
      "i64", // off_t offset
    ],
    result: "pointer",
  },
  mremap: {
    // long syscall(long number, ...), called as syscall(SYS_mremap, void *old_address, size_t old_size,
    // size_t new_size, int flags, void *new_address): the system call itself, not libc's mremap, which
    // memory-registration libraries loaded into the process (MPICH's libfabric, UCX) patch with hooks
    // that drop the variadic new_address.
    name: "syscall",
    parameters: [
      "i64", // long number (SYS_mremap)
      "pointer", // void *old_address
      "usize", // size_t old_size (0: a second mapping of the same pages of a MAP_SHARED mapping)
      "usize", // size_t new_size
      "i64", // int flags (MREMAP_MAYMOVE | MREMAP_FIXED)
      "pointer", // void *new_address
    ],
    result: "pointer",
  },
  clock_gettime: {
    // int clock_gettime(clockid_t clockid, struct timespec *tp);
    parameters: [
      "i32", // clockid_t clockid (CLOCK_MONOTONIC)
      "buffer", // struct timespec *tp: time_t tv_sec, long tv_nsec (two int64 on x86-64 and aarch64)
    ],
    result: "i32",
  },
  sched_yield: {
    // int sched_yield(void);
    parameters: [],
    result: "i32",
  },
  munmap: {
    // int munmap(void *addr, size_t length);
    parameters: [
      "pointer", // void *addr
      "usize", // size_t length
    ],
    result: "i32",
  },
  close: {
    // int close(int fd);
    parameters: [
      "i32", // int fd
    ],
    result: "i32",
  },
  kill: {
    // int kill(pid_t pid, int sig);
    parameters: [
      "i32", // pid_t pid
      "i32", // int sig
    ],
    result: "i32",
  },
  statvfs: {
    // int statvfs(const char *path, struct statvfs *buf);
    parameters: [
      "buffer", // const char *path (NUL-terminated)
      "buffer", // struct statvfs *buf (112 bytes on 64-bit glibc and musl; see statvfs() below)
    ],
    result: "i32",
  },
  getpid: {
    // pid_t getpid(void);
    parameters: [],
    result: "i32",
  },
  __errno_location: {
    // int *__errno_location(void);
    parameters: [],
    result: "pointer",
  },
  strerror: {
    // char *strerror(int errnum);
    parameters: [
      "i32", // int errnum
    ],
    result: "pointer",
  },
  posix_fallocate: {
    // int posix_fallocate(int fd, off_t offset, off_t len);  (returns an errno value; errno is untouched)
    parameters: [
      "i32", // int fd
      "i64", // off_t offset
      "i64", // off_t len
    ],
    result: "i32",
  },
  futex_wait: {
    // long syscall(long number, ...), called as
    // syscall(SYS_futex, uint32_t *uaddr, FUTEX_WAIT, uint32_t val, const struct timespec *timeout).
    // Nonblocking: it sleeps on a pool thread and the event loop goes on.
    name: "syscall",
    parameters: [
      "i64", // long number (SYS_futex)
      "pointer", // uint32_t *uaddr (in a MAP_SHARED mapping: the futex is shared between processes)
      "i64", // int futex_op (FUTEX_WAIT)
      "i64", // uint32_t val (sleep only while *uaddr == val)
      "buffer", // const struct timespec *timeout (relative: { time_t tv_sec; long tv_nsec; })
    ],
    result: "i64",
    nonblocking: true,
  },
  futex_wait_sync: {
    // The same call as futex_wait, made on the calling thread: it blocks that thread (for a
    // communication thread waiting on a peer, where a pool thread's wake-up would add its own latency).
    name: "syscall",
    parameters: [
      "i64", // long number (SYS_futex)
      "pointer", // uint32_t *uaddr
      "i64", // int futex_op (FUTEX_WAIT)
      "i64", // uint32_t val
      "buffer", // const struct timespec *timeout
    ],
    result: "i64",
  },
  poll: {
    // int poll(struct pollfd *fds, nfds_t nfds, int timeout);
    // Nonblocking: it sleeps on a pool thread and the event loop goes on.
    parameters: [
      "buffer", // struct pollfd *fds ({ int fd; short events; short revents; }, 8 bytes each)
      "u64", // nfds_t nfds
      "i32", // int timeout (milliseconds)
    ],
    result: "i32",
    nonblocking: true,
  },
  poll_sync: {
    // The same call as poll, made on the calling thread: it blocks that thread (for a wait that cannot be
    // awaited, such as the last words to a launcher in an unload handler).
    name: "poll",
    parameters: [
      "buffer", // struct pollfd *fds
      "u64", // nfds_t nfds
      "i32", // int timeout (milliseconds)
    ],
    result: "i32",
  },
  read: {
    // ssize_t read(int fd, void *buf, size_t count);
    // Made on the calling thread, only once poll said the descriptor is readable: the waiting is poll's.
    parameters: [
      "i32", // int fd
      "buffer", // void *buf
      "usize", // size_t count
    ],
    result: "isize",
  },
  write: {
    // ssize_t write(int fd, const void *buf, size_t count);
    parameters: [
      "i32", // int fd
      "buffer", // const void *buf
      "usize", // size_t count
    ],
    result: "isize",
  },
  socketpair: {
    // int socketpair(int domain, int type, int protocol, int sv[2]);
    parameters: [
      "i32", // int domain (AF_UNIX)
      "i32", // int type (SOCK_STREAM, optionally | SOCK_CLOEXEC)
      "i32", // int protocol (0)
      "buffer", // int sv[2] (the two connected descriptors, written by the call)
    ],
    result: "i32",
  },
  getpagesize: {
    // int getpagesize(void);
    parameters: [],
    result: "i32",
  },
  futex_wake: {
    // long syscall(long number, ...), called as syscall(SYS_futex, uint32_t *uaddr, FUTEX_WAKE, int nr_wake)
    name: "syscall",
    parameters: [
      "i64", // long number (SYS_futex)
      "pointer", // uint32_t *uaddr
      "i64", // int futex_op (FUTEX_WAKE)
      "i64", // int nr_wake (how many sleepers to wake)
    ],
    result: "i64",
  },
} as const satisfies Deno.ForeignLibraryInterface;

/** The loaded symbols of libc. */
export type LibcSymbols = Deno.DynamicLibrary<typeof LIBC_SYMBOLS>["symbols"];

/** `oflag` bits of `shm_open` (Linux). */
export const O_RDWR = 0o2;
/** Create the object if it does not exist. */
export const O_CREAT = 0o100;
/** With `O_CREAT`: fail with EEXIST if it exists. */
export const O_EXCL = 0o200;
/** Pages may be read. */
export const PROT_READ = 1;
/** Pages may be written. */
export const PROT_WRITE = 2;
/** Share the mapping with every process that maps the same object. */
export const MAP_SHARED = 1;
/** errno: no such file or directory. */
export const ENOENT = 2;
/** errno: no such process. */
export const ESRCH = 3;
/** errno: operation not permitted. */
export const EPERM = 1;
/** errno: file exists. */
export const EEXIST = 17;
/** errno: no space left on device. */
export const ENOSPC = 28;
/** errno: out of memory (also `mmap` beyond what the system may commit). */
export const ENOMEM = 12;
/** `poll` event: there is data to read. */
export const POLLIN = 0x1;
/** errno: interrupted by a signal; the call can be made again. */
export const EINTR = 4;
/** errno: the call would block (a non-blocking descriptor). */
export const EAGAIN = 11;
/** Socket domain: a socket within this machine. */
export const AF_UNIX = 1;
/** Socket type: a connected byte stream. */
export const SOCK_STREAM = 1;
/** futex operation: sleep while the word holds a value. */
export const FUTEX_WAIT = 0;
/** futex operation: wake sleepers. */
export const FUTEX_WAKE = 1;

/**
 * The futex system call's number on this architecture, or `undefined` where the binding does not know
 * it (then callers poll instead).
 */
export const SYS_FUTEX: number | undefined = ({ x86_64: 202, aarch64: 98 } as Record<string, number>)[
  Deno.build.arch
];

// The symbolic names of the errno values these calls can return, for messages.
const ERRNO_NAMES: Readonly<Record<number, string>> = {
  1: "EPERM",
  2: "ENOENT",
  3: "ESRCH",
  4: "EINTR",
  5: "EIO",
  6: "ENXIO",
  9: "EBADF",
  11: "EAGAIN",
  12: "ENOMEM",
  13: "EACCES",
  14: "EFAULT",
  16: "EBUSY",
  17: "EEXIST",
  19: "ENODEV",
  22: "EINVAL",
  23: "ENFILE",
  24: "EMFILE",
  27: "EFBIG",
  28: "ENOSPC",
  32: "EPIPE",
  36: "ENAMETOOLONG",
  38: "ENOSYS",
  61: "ENODATA",
  71: "EPROTO",
  75: "EOVERFLOW",
  93: "EPROTONOSUPPORT",
  95: "EOPNOTSUPP",
  104: "ECONNRESET",
  110: "ETIMEDOUT",
  111: "ECONNREFUSED",
  113: "EHOSTUNREACH",
};

/** libc through the one locator: glibc >= 2.34 has shm_open in libc.so.6 itself. */
const LIBC: LibrarySpec = {
  name: "libc",
  envVar: "DCOMM_LIBC_PATH",
  sonames: ["libc.so.6"],
  fix: "run on Linux with glibc 2.34 or newer (shm_open in libc.so.6), with --allow-ffi",
};

let library: Deno.DynamicLibrary<typeof LIBC_SYMBOLS> | undefined;

/**
 * The libc symbols, opening libc on the first call.
 *
 * @returns The bound symbols.
 * @throws {UnsupportedError} On an OS other than Linux.
 * @throws {LibraryNotFoundError} If libc cannot be opened.
 */
export function libc(): LibcSymbols {
  if (library !== undefined) return library.symbols;
  if (Deno.build.os !== "linux") {
    throw new UnsupportedError(
      `Cannot bind libc: shared memory transport supports Linux only, this is ${Deno.build.os}`,
    );
  }
  library = openLibrary(LIBC, LIBC_SYMBOLS).lib;
  return library.symbols;
}

/**
 * The mremap system call's number on this architecture, or `undefined` where the binding does not know
 * it (then the host segment is not available).
 */
export const SYS_MREMAP: number | undefined = ({ x86_64: 25, aarch64: 216 } as Record<string, number>)[
  Deno.build.arch
];

/** mmap flag: a mapping private to this process. */
export const MAP_PRIVATE = 2;
/** mmap flag: put the mapping at the address given, replacing what was mapped there. */
export const MAP_FIXED = 0x10;
/** mmap flag: memory not backed by a file (zero-filled). */
export const MAP_ANONYMOUS = 0x20;
/** mremap flag: the kernel may move the mapping. */
export const MREMAP_MAYMOVE = 1;
/** mremap flag: put the mapping at `new_address`, replacing what was mapped there. */
export const MREMAP_FIXED = 2;

/** A libc call returned an error; `errno` says which. */
export class LibcError extends DistError {
  /** The call that failed, as `name(args)`. */
  readonly call: string;
  /** The errno value. */
  readonly errno: number;

  /**
   * Builds the error of a failed call; the message says errno in words.
   *
   * @param call The call, as `name(args)`.
   * @param errno The errno value it left.
   * @param options The cause.
   */
  constructor(call: string, errno: number, options: DistErrorOptions = {}) {
    super(`${call} failed: ${errnoText(errno)}`, { code: "LIBC", ...options });
    this.call = call;
    this.errno = errno;
  }
}

/**
 * errno in words: its symbolic name and `strerror`'s text.
 *
 * @param errno An errno value.
 * @returns For example `"ENOENT (No such file or directory)"`.
 */
export function errnoText(errno: number): string {
  const name = ERRNO_NAMES[errno] ?? `errno ${errno}`;
  const text = Deno.UnsafePointerView.getCString(nonNull(libc().strerror(errno), "strerror"));
  return `${name} (${text})`;
}

/**
 * errno's symbolic name alone.
 *
 * @param errno An errno value.
 * @returns For example `"ENOSYS"`, or `"errno 200"` for a value without a known name.
 */
export function errnoName(errno: number): string {
  return ERRNO_NAMES[errno] ?? `errno ${errno}`;
}

/**
 * `strerror`'s text for an errno value.
 *
 * @param errno An errno value.
 * @returns For example `"Function not implemented"`.
 */
export function strerror(errno: number): string {
  return Deno.UnsafePointerView.getCString(nonNull(libc().strerror(errno), "strerror"));
}

/**
 * The calling thread's errno. Read it right after the failed call: nothing in between may run libc.
 *
 * @returns The errno value.
 */
export function errno(): number {
  return new Deno.UnsafePointerView(nonNull(libc().__errno_location(), "__errno_location")).getInt32();
}

function nonNull(pointer: Deno.PointerValue, call: string): Deno.PointerObject {
  if (pointer === null) throw new LibcError(`${call}()`, 0);
  return pointer;
}

const encoder = new TextEncoder();

function cString(text: string): Uint8Array<ArrayBuffer> {
  const bytes = new Uint8Array(encoder.encode(text).length + 1);
  encoder.encodeInto(text, bytes);
  return bytes;
}

/** Options of {@linkcode shmOpen}. */
export interface ShmOpenOptions {
  /** Create the object; fail with EEXIST if it already exists. @default false */
  create?: boolean;
  /** Permission bits of a created object. @default 0o600 */
  mode?: number;
}

/**
 * Opens (or creates) a POSIX shared memory object for reading and writing.
 *
 * @param name The object's name: a slash then up to 254 characters without another slash.
 * @param options Whether to create it, and its mode.
 * @returns The file descriptor.
 * @throws {LibcError} If `shm_open` fails.
 */
export function shmOpen(name: string, options: ShmOpenOptions = {}): number {
  const flags = O_RDWR | (options.create ? O_CREAT | O_EXCL : 0);
  const fd = libc().shm_open(cString(name), flags, options.mode ?? 0o600);
  if (fd < 0) throw new LibcError(`shm_open(${JSON.stringify(name)})`, errno());
  return fd;
}

/**
 * Removes a shared memory object's name; mappings stay valid until unmapped.
 *
 * @param name The object's name.
 * @returns `false` if no object had that name (ENOENT), `true` if it was removed.
 * @throws {LibcError} If `shm_unlink` fails for another reason.
 */
export function shmUnlink(name: string): boolean {
  if (libc().shm_unlink(cString(name)) === 0) return true;
  const code = errno();
  if (code === ENOENT) return false;
  throw new LibcError(`shm_unlink(${JSON.stringify(name)})`, code);
}

/**
 * Sets the size of the file behind `fd`.
 *
 * @param fd An open file descriptor.
 * @param bytes The new size.
 * @throws {LibcError} If `ftruncate` fails.
 */
export function ftruncate(fd: number, bytes: number): void {
  if (libc().ftruncate(fd, BigInt(bytes)) !== 0) throw new LibcError(`ftruncate(${fd}, ${bytes})`, errno());
}

/** A shared, readable and writable mapping of a file. */
export interface SharedMapping {
  /** The mapping's address. */
  readonly pointer: Deno.PointerObject;
  /** Its length in bytes. */
  readonly bytes: number;
  /**
   * The mapped memory as an ArrayBuffer. It must not be touched after {@linkcode munmap}: the memory
   * is gone and an access crashes the process.
   */
  readonly buffer: ArrayBuffer;
}

/**
 * Reserves the blocks of `fd` up to `bytes`, so that running out of space (a small /dev/shm) shows up
 * here as ENOSPC instead of as a SIGBUS on first touch of a mapped page.
 *
 * @param fd An open file descriptor.
 * @param bytes How many bytes from the start.
 * @throws {LibcError} If `posix_fallocate` fails.
 */
export function fallocate(fd: number, bytes: number): void {
  const code = libc().posix_fallocate(fd, 0n, BigInt(bytes));
  if (code !== 0) throw new LibcError(`posix_fallocate(${fd}, 0, ${bytes})`, code);
}

/**
 * Sleeps on a pool thread while the 32-bit word at `word` holds `expected`, for at most `timeoutMs`, or
 * until {@linkcode futexWake}. It may also return early (a signal, or the word changed before the call);
 * callers look at the word again.
 *
 * @param word The word's address, in a shared mapping.
 * @param expected The value the caller saw.
 * @param timeoutMs The longest sleep.
 * @returns Resolves when the sleep ends.
 * @throws {UnsupportedError} If the futex call number is unknown on this architecture.
 */
export async function futexWait(
  word: Deno.PointerObject,
  expected: number,
  timeoutMs: number,
): Promise<void> {
  if (SYS_FUTEX === undefined) throw new UnsupportedError(`Cannot use futex on ${Deno.build.arch}`);
  const ms = Math.max(0, Math.floor(timeoutMs));
  // The nonblocking call keeps this buffer alive until it returns.
  const timeout = new BigInt64Array([BigInt(Math.floor(ms / 1000)), BigInt((ms % 1000) * 1_000_000)]);
  await libc().futex_wait(BigInt(SYS_FUTEX), word, BigInt(FUTEX_WAIT), BigInt(expected), timeout);
}

const syncTimeout = new BigInt64Array(2);

/**
 * {@linkcode futexWait} on the calling thread: blocks it (its event loop too) while the word holds
 * `expected`, for at most `timeoutMs`, or until {@linkcode futexWake}.
 *
 * @param word The word's address, in a shared mapping.
 * @param expected The value the caller saw.
 * @param timeoutMs The longest sleep.
 * @throws {UnsupportedError} If the futex call number is unknown on this architecture.
 */
export function futexWaitSync(word: Deno.PointerObject, expected: number, timeoutMs: number): void {
  if (SYS_FUTEX === undefined) throw new UnsupportedError(`Cannot use futex on ${Deno.build.arch}`);
  const ns = Math.max(0, Math.floor(timeoutMs * 1e6));
  syncTimeout[0] = BigInt(Math.floor(ns / 1e9));
  syncTimeout[1] = BigInt(ns % 1e9);
  libc().futex_wait_sync(BigInt(SYS_FUTEX), word, BigInt(FUTEX_WAIT), BigInt(expected), syncTimeout);
}

/**
 * Wakes threads (of any process) sleeping in {@linkcode futexWait} on `word`.
 *
 * @param word The word's address, in a shared mapping.
 * @returns How many were woken.
 * @throws {UnsupportedError} If the futex call number is unknown on this architecture.
 */
export function futexWake(word: Deno.PointerObject): number {
  if (SYS_FUTEX === undefined) throw new UnsupportedError(`Cannot use futex on ${Deno.build.arch}`);
  return Number(libc().futex_wake(BigInt(SYS_FUTEX), word, BigInt(FUTEX_WAKE), 0x7fff_ffffn));
}

/**
 * Maps `bytes` of `fd` shared, readable and writable.
 *
 * @param fd An open file descriptor at least `bytes` long.
 * @param bytes How many bytes to map.
 * @returns The mapping.
 * @throws {LibcError} If `mmap` fails.
 */
export function mmapShared(fd: number, bytes: number): SharedMapping {
  const pointer = libc().mmap(null, BigInt(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0n);
  if (mapFailed(pointer)) throw new LibcError(`mmap(fd ${fd}, ${bytes} bytes)`, errno());
  const mapped = pointer as Deno.PointerObject;
  return { pointer: mapped, bytes, buffer: Deno.UnsafePointerView.getArrayBuffer(mapped, bytes) };
}

function mapFailed(pointer: Deno.PointerValue): boolean {
  // MAP_FAILED is (void *)-1.
  return pointer === null || Deno.UnsafePointer.value(pointer) === 0xffff_ffff_ffff_ffffn;
}

/**
 * A second mapping of the same pages as a shared mapping (`mremap` with an old size of 0), anywhere or
 * at `at`, replacing whatever was mapped there. The pages live until every mapping of them is unmapped,
 * so a duplicate outlives the original's `munmap`.
 *
 * @param pointer The start of a page-aligned range of a MAP_SHARED mapping.
 * @param bytes The range's length (a multiple of the page size).
 * @param at Where to put the duplicate (page-aligned; its old contents are replaced). @default anywhere
 * @returns The duplicate.
 * @throws {LibcError} If `mremap` fails.
 */
export function duplicateMapping(
  pointer: Deno.PointerObject,
  bytes: number,
  at?: Deno.PointerObject,
): SharedMapping {
  if (SYS_MREMAP === undefined) throw new UnsupportedError(`Cannot use mremap on ${Deno.build.arch}`);
  const flags = MREMAP_MAYMOVE | (at === undefined ? 0 : MREMAP_FIXED);
  const dup = libc().mremap(BigInt(SYS_MREMAP), pointer, 0n, BigInt(bytes), BigInt(flags), at ?? null);
  if (mapFailed(dup)) throw new LibcError(`mremap(${bytes} bytes, duplicate)`, errno());
  const mapped = dup as Deno.PointerObject;
  return { pointer: mapped, bytes, buffer: Deno.UnsafePointerView.getArrayBuffer(mapped, bytes) };
}

/**
 * Puts fresh zero-filled private memory at `at`, replacing whatever was mapped there (to give back a
 * range of WebAssembly memory that a {@linkcode duplicateMapping} had taken over).
 *
 * @param at A page-aligned address.
 * @param bytes A multiple of the page size.
 * @throws {LibcError} If `mmap` fails.
 */
export function mapAnonymousAt(at: Deno.PointerObject, bytes: number): void {
  const flags = MAP_PRIVATE | MAP_FIXED | MAP_ANONYMOUS;
  const pointer = libc().mmap(at, BigInt(bytes), PROT_READ | PROT_WRITE, flags, -1, 0n);
  if (mapFailed(pointer)) throw new LibcError(`mmap(anonymous, ${bytes} bytes, fixed)`, errno());
}

/**
 * Gives the processor to another runnable thread, if any (a polite spin: on a machine with fewer cores
 * than spinning threads, the peer being waited for may be the one that needs this core).
 */
export function schedYield(): void {
  libc().sched_yield();
}

/** CLOCK_MONOTONIC, the clock of `performance.now()` (Rust's `Instant`) on Linux. */
const CLOCK_MONOTONIC = 1;
const timespec = new BigInt64Array(2);
const timespecWords = new Int32Array(timespec.buffer);
const timespecBytes = new Uint8Array(timespec.buffer);
/** Epoch milliseconds minus the monotonic clock's, measured once on first use. */
let epochOffsetMs: number | undefined;

/** Milliseconds of CLOCK_MONOTONIC (its seconds fit 31 bits for 68 years of uptime). */
function monotonicMs(): number {
  libc().clock_gettime(CLOCK_MONOTONIC, timespecBytes);
  return timespecWords[0] * 1000 + timespecWords[2] / 1e6;
}

/**
 * The time now as a Unix epoch in milliseconds, with `performance.now()`'s resolution, in one FFI fast call
 * (about 45 ns against `performance.now()`'s 115 here): for the reports of calls that take a microsecond.
 * Read through CLOCK_MONOTONIC, anchored once to `performance.timeOrigin + performance.now()`, so it
 * agrees with the epochs the other reports give to within microseconds.
 *
 * @returns Milliseconds since the Unix epoch.
 */
export function epochNowMs(): number {
  const mono = monotonicMs();
  epochOffsetMs ??= performance.timeOrigin + performance.now() - mono;
  return mono + epochOffsetMs;
}

/**
 * Unmaps a mapping made by {@linkcode mmapShared}.
 *
 * @param mapping The mapping; its buffer must not be used afterwards.
 * @throws {LibcError} If `munmap` fails.
 */
export function munmap(mapping: SharedMapping): void {
  if (libc().munmap(mapping.pointer, BigInt(mapping.bytes)) !== 0) {
    throw new LibcError(`munmap(${mapping.bytes} bytes)`, errno());
  }
}

/**
 * Closes a file descriptor.
 *
 * @param fd The descriptor.
 * @throws {LibcError} If `close` fails.
 */
export function close(fd: number): void {
  if (libc().close(fd) !== 0) throw new LibcError(`close(${fd})`, errno());
}

/**
 * Waits on a pool thread until `fd` is readable or `timeoutMs` passed.
 *
 * @param fd An open file descriptor.
 * @param timeoutMs The longest wait (0 only looks).
 * @returns Whether `fd` is readable (or has an error, hang-up or bad descriptor pending, which the next
 * read reports). A failed `poll` (EINTR: a signal) counts as not readable: callers look again. (Its errno
 * cannot be read: it was set on the pool thread.)
 */
export async function pollReadable(fd: number, timeoutMs: number): Promise<boolean> {
  // The nonblocking call keeps this buffer alive until it returns.
  const pollfd = new Int32Array([fd, POLLIN]);
  const n = await libc().poll(pollfd, 1n, Math.max(0, Math.floor(timeoutMs)));
  return n > 0 && new Int16Array(pollfd.buffer)[3] !== 0;
}

/**
 * {@linkcode pollReadable} on the calling thread: blocks it (its event loop too) until `fd` is readable or
 * `timeoutMs` passed.
 *
 * @param fd An open file descriptor.
 * @param timeoutMs The longest wait (0 only looks).
 * @returns Whether `fd` is readable (or has an error, hang-up or bad descriptor pending). A `poll`
 * interrupted by a signal counts as not readable.
 */
export function pollReadableSync(fd: number, timeoutMs: number): boolean {
  const pollfd = new Int32Array([fd, POLLIN]);
  const n = libc().poll_sync(pollfd, 1n, Math.max(0, Math.floor(timeoutMs)));
  return n > 0 && new Int16Array(pollfd.buffer)[3] !== 0;
}

/**
 * Reads what `fd` has, up to `buffer`'s length, on the calling thread, again after a signal (EINTR). It
 * blocks while a blocking descriptor has nothing: call it once {@linkcode pollReadable} said `fd` is readable.
 *
 * @param fd An open file descriptor.
 * @param buffer Where the bytes go.
 * @returns How many bytes were read; 0 at the end of the stream (the peer closed it).
 * @throws {LibcError} If `read` fails.
 */
export function readSome(fd: number, buffer: Uint8Array<ArrayBuffer>): number {
  for (;;) {
    const n = Number(libc().read(fd, buffer, BigInt(buffer.length)));
    if (n >= 0) return n;
    const code = errno();
    if (code !== EINTR) throw new LibcError(`read(${fd})`, code);
  }
}

/**
 * Writes all of `bytes` to `fd` on the calling thread, again after a signal (EINTR) or a short write.
 * A peer that closed its end gives EPIPE (Deno ignores SIGPIPE).
 *
 * @param fd An open file descriptor.
 * @param bytes What to write.
 * @throws {LibcError} If `write` fails.
 */
export function writeAll(fd: number, bytes: Uint8Array<ArrayBuffer>): void {
  let at = 0;
  while (at < bytes.length) {
    const n = Number(libc().write(fd, at === 0 ? bytes : bytes.slice(at), BigInt(bytes.length - at)));
    if (n >= 0) at += n;
    else {
      const code = errno();
      if (code !== EINTR) throw new LibcError(`write(${fd}, ${bytes.length - at} bytes)`, code);
    }
  }
}

/** Options of {@linkcode socketPair}. */
export interface SocketPairOptions {
  /** Make both descriptors close-on-exec, so that no child process inherits them. @default false */
  closeOnExec?: boolean;
}

/**
 * A pair of connected Unix stream sockets: what a launcher creates to talk to the process it starts
 * (Hydra's PMI socket). Close both with {@linkcode close}.
 *
 * @param options Whether they are close-on-exec.
 * @returns The two descriptors.
 * @throws {LibcError} If `socketpair` fails.
 */
export function socketPair(options: SocketPairOptions = {}): [number, number] {
  const sv = new Int32Array(2);
  const type = SOCK_STREAM | (options.closeOnExec ? SOCK_CLOEXEC : 0);
  if (libc().socketpair(AF_UNIX, type, 0, sv) !== 0) throw new LibcError("socketpair(AF_UNIX)", errno());
  return [sv[0], sv[1]];
}

const SOCK_CLOEXEC = 0o2000000;

/**
 * The host's page size.
 *
 * @returns Bytes per page (4096 on x86-64).
 */
export function pageSize(): number {
  return libc().getpagesize();
}

/**
 * This process's id.
 *
 * @returns The pid.
 */
export function getpid(): number {
  return libc().getpid();
}

/**
 * Whether a process exists, by `kill(pid, 0)`: ESRCH means it does not; EPERM means it exists but
 * belongs to another user. A zombie (dead, not yet reaped by its parent) still counts as existing.
 *
 * @param pid The process id.
 * @returns `false` only if no process has that id.
 * @throws {LibcError} If `kill` fails for another reason.
 */
export function processExists(pid: number): boolean {
  if (libc().kill(pid, 0) === 0) return true;
  const code = errno();
  if (code === ESRCH) return false;
  if (code === EPERM) return true;
  throw new LibcError(`kill(${pid}, 0)`, code);
}

/** What {@linkcode statvfs} says about the space of a file system. */
export interface FsSpace {
  /** Bytes an unprivileged process may still allocate there (`f_bavail × f_frsize`). */
  readonly freeBytes: number;
  /** The file system's size in bytes (`f_blocks × f_frsize`). */
  readonly totalBytes: number;
}

// struct statvfs of glibc (<bits/statvfs.h>) and musl on 64-bit Linux: unsigned long f_bsize (0),
// f_frsize (8), then 64-bit f_blocks (16), f_bfree (24), f_bavail (32), f_files, f_ffree, f_favail,
// unsigned long f_fsid, f_flag, f_namemax, int __f_spare[6]: 112 bytes. The same on x86_64 and aarch64
// (no `__f_unused` word: that one is only where __WORDSIZE is 32).
/** `sizeof(struct statvfs)` and the offsets of the fields {@linkcode statvfs} reads (checked against
 * `<sys/statvfs.h>` by tests/ffi/libc_statvfs_test.ts). */
export const STATVFS_LAYOUT = { size: 112, f_frsize: 8, f_blocks: 16, f_bavail: 32 } as const;
const STATVFS_BYTES = STATVFS_LAYOUT.size;
const STATVFS_FRSIZE = STATVFS_LAYOUT.f_frsize;
const STATVFS_BLOCKS = STATVFS_LAYOUT.f_blocks;
const STATVFS_BAVAIL = STATVFS_LAYOUT.f_bavail;

/**
 * The free and total space of the file system holding `path`, by `statvfs` (what `df` shows).
 *
 * @param path A path on the file system, such as `"/dev/shm"`.
 * @returns Its free and total bytes.
 * @throws {UnsupportedError} Where the layout of `struct statvfs` is not known (other than x86_64 and
 * aarch64).
 * @throws {LibcError} If `statvfs` fails (ENOENT: no such path).
 */
export function statvfs(path: string): FsSpace {
  if (Deno.build.arch !== "x86_64" && Deno.build.arch !== "aarch64") {
    throw new UnsupportedError(`Cannot read struct statvfs on ${Deno.build.arch}`);
  }
  const buf = new Uint8Array(STATVFS_BYTES + 16); // room to spare, should a libc add a field
  if (libc().statvfs(cString(path), buf) !== 0) {
    throw new LibcError(`statvfs(${JSON.stringify(path)})`, errno());
  }
  const view = new DataView(buf.buffer);
  const frsize = Number(view.getBigUint64(STATVFS_FRSIZE, true));
  return {
    freeBytes: Number(view.getBigUint64(STATVFS_BAVAIL, true)) * frsize,
    totalBytes: Number(view.getBigUint64(STATVFS_BLOCKS, true)) * frsize,
  };
}

/**
 * Sends a signal to a process by `kill(pid, sig)`: unlike `Deno.kill`, it needs no `--allow-run`.
 *
 * @param pid The process id.
 * @param signal The signal's number (2 SIGINT, 15 SIGTERM, 1 SIGHUP on Linux).
 * @throws {LibcError} If `kill` fails (ESRCH: no such process).
 */
export function signalProcess(pid: number, signal: number): void {
  if (libc().kill(pid, signal) !== 0) throw new LibcError(`kill(${pid}, ${signal})`, errno());
}

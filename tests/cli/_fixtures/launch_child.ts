/** A rank for the launcher tests: prints its environment, then behaves as the first argument says. */
const rank = Number(Deno.env.get("RANK"));
const attempt = Number(Deno.env.get("DCOMM_RESTART_COUNT"));
console.log(
  `ENV ${
    JSON.stringify({
      RANK: Deno.env.get("RANK"),
      WORLD_SIZE: Deno.env.get("WORLD_SIZE"),
      LOCAL_RANK: Deno.env.get("LOCAL_RANK"),
      LOCAL_WORLD_SIZE: Deno.env.get("LOCAL_WORLD_SIZE"),
      MASTER_ADDR: Deno.env.get("MASTER_ADDR"),
      MASTER_PORT: Deno.env.get("MASTER_PORT"),
      GROUP_RANK: Deno.env.get("GROUP_RANK"),
      DCOMM_RUN_ID: Deno.env.get("DCOMM_RUN_ID"),
      DCOMM_RESTART_COUNT: Deno.env.get("DCOMM_RESTART_COUNT"),
      TORCHELASTIC_RESTART_COUNT: Deno.env.get("TORCHELASTIC_RESTART_COUNT"),
      secret: (Deno.env.get("DCOMM_STORE_SECRET") ?? "").length,
      args: Deno.args.slice(1),
    })
  }`,
);
console.error(`to stderr from ${rank}`);
const mode = Deno.args[0];
if (mode === "fail" && rank === 1) {
  for (let i = 0; i < 10; i++) console.log(`line ${i}`);
  console.error("something broke");
  Deno.exit(3);
}
if (mode === "fail" || mode === "hang") {
  // Waits to be stopped by the launcher; writes its pid so the test can check that nothing is left.
  // Written whole, then renamed: a rank stopped mid-write must not leave an empty pid file behind.
  const dir = Deno.env.get("PID_DIR");
  Deno.writeTextFileSync(`${dir}/.${rank}.tmp`, String(Deno.pid));
  Deno.renameSync(`${dir}/.${rank}.tmp`, `${dir}/${rank}`);
  await new Promise((r) => setTimeout(r, 60_000));
}
if (mode === "trap") {
  // Says which signal reached it and exits 0, so that only the launcher can make the exit code 128 + n.
  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    Deno.addSignalListener(signal, () => {
      console.log(`rank ${rank} got ${signal}`);
      Deno.exit(0);
    });
  }
  console.log(`rank ${rank} ready`);
  await new Promise((r) => setTimeout(r, 60_000));
}
if (mode === "throw" && rank === 1) {
  // Deno colours its report of an uncaught error even into a pipe, unless NO_COLOR is set.
  throw new Error("rank 1 threw");
}
if (mode === "restart") {
  // Rank 1 fails on the first attempt; the other ranks wait to be stopped. Every rank succeeds afterwards.
  if (attempt === 0 && rank === 1) {
    console.log(`rank 1 fails on attempt 0`);
    Deno.exit(3);
  }
  if (attempt === 0) await new Promise((r) => setTimeout(r, 60_000));
  console.log(`rank ${rank} ok on attempt ${attempt}`);
}
if (mode === "wait") {
  // Says it is ready and waits, dying of the first SIGTERM or SIGINT (Deno's default): a non-zero exit.
  console.log(`rank ${rank} ready`);
  await new Promise((r) => setTimeout(r, 60_000));
}

/**
 * A rank of the deterministic-mode tests (`deterministic_cases.ts`), a launched process: prints
 * `RESULT {json}`. Its argument: `det` (deterministic mode, asked for by `init` and by every call) or an
 * algorithm name (the default mode, every all-reduce by that algorithm: the control that shows the order
 * matters). `DET_CHUNK_BYTES` sets `init`'s `chunkBytes`.
 *
 * @module
 */
import { init } from "../../../backend/init.ts";
import { applyHostOf } from "../../_util/launched.ts";
import { runCases } from "./deterministic_cases.ts";

applyHostOf();
const mode = Deno.args[0] ?? "det";
const chunkBytes = Number(Deno.env.get("DET_CHUNK_BYTES") ?? 1 << 20);
const pg = await init({ deterministic: mode === "det", chunkBytes });
console.log(`RESULT ${JSON.stringify({ rank: pg.rank, hashes: await runCases(pg, mode) })}`);
await pg.close();

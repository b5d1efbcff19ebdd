/**
 * The shared secret of a job's store. The launcher generates one with {@linkcode generateSecret} and
 * hands it to every rank in the `DCOMM_STORE_SECRET` environment variable; the TCP store's client and server
 * each prove knowledge of it by challenge–response (HMAC-SHA256 over both sides' nonces), so the secret
 * itself never travels. The security model: `docs/store.md`.
 *
 * @module
 */

/**
 * The environment variable that carries the store secret from the launcher to the ranks.
 *
 * @example Starting a rank with the job's secret
 * ```ts
 * import { generateSecret, STORE_SECRET_ENV } from "@dcomm/dcomm/store";
 * import assert from "node:assert/strict";
 * const rank = new Deno.Command(Deno.execPath(), {
 *   args: ["eval", `console.log(Deno.env.get("${STORE_SECRET_ENV}")?.length)`],
 *   env: { [STORE_SECRET_ENV]: generateSecret() },
 * });
 * assert.equal(new TextDecoder().decode((await rank.output()).stdout), "64\n");
 * ```
 */
export const STORE_SECRET_ENV = "DCOMM_STORE_SECRET";

/**
 * A fresh random secret: 32 bytes from the system's CSPRNG, as 64 hex digits (safe in any environment).
 *
 * @returns The secret.
 *
 * @example Handing a secret to the ranks
 * ```ts
 * import { generateSecret, secretFromEnv, STORE_SECRET_ENV } from "@dcomm/dcomm/store";
 * import assert from "node:assert/strict";
 *
 * // A launcher reuses the job's secret if it was given one, and makes one otherwise.
 * const secret = secretFromEnv() ?? generateSecret();
 * const env = { [STORE_SECRET_ENV]: secret }; // each rank's Deno.Command `env`
 * assert.equal(env.DCOMM_STORE_SECRET, secret);
 * assert.match(generateSecret(), /^[0-9a-f]{64}$/);
 * ```
 */
export function generateSecret(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(32));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * The secret in {@linkcode STORE_SECRET_ENV}, if this process may read it without a permission prompt.
 *
 * @returns The secret, or `undefined` when the variable is unset, empty or not readable.
 *
 * @example What a rank started by the launcher reads
 * ```ts
 * import { secretFromEnv, STORE_SECRET_ENV } from "@dcomm/dcomm/store";
 * import assert from "node:assert/strict";
 * const saved = Deno.env.get(STORE_SECRET_ENV);
 * Deno.env.set(STORE_SECRET_ENV, "s3cret"); // as the launcher sets it for each rank
 * assert.equal(secretFromEnv(), "s3cret");
 * Deno.env.set(STORE_SECRET_ENV, "");
 * assert.equal(secretFromEnv(), undefined); // empty: no secret
 * // (this example leaves the environment as it found it)
 * if (saved === undefined) Deno.env.delete(STORE_SECRET_ENV);
 * else Deno.env.set(STORE_SECRET_ENV, saved);
 * ```
 */
export function secretFromEnv(): string | undefined {
  const status = Deno.permissions.querySync({ name: "env", variable: STORE_SECRET_ENV });
  if (status.state !== "granted") return undefined;
  return Deno.env.get(STORE_SECRET_ENV) || undefined;
}

/**
 * The environment variable that lets a store server without a secret serve beyond loopback: `1` opts in
 * (as the server option `insecure: true` does). Without it, such a server refuses to bind anything but a
 * loopback address, since anyone who reaches its port could read, change and delete every key.
 *
 * @example Opting in for a job on a private network
 * ```ts
 * import { STORE_INSECURE_ENV, TcpStoreServer } from "@dcomm/dcomm/store";
 * import assert from "node:assert/strict";
 * assert.equal(STORE_INSECURE_ENV, "DCOMM_STORE_INSECURE");
 * // What `DCOMM_STORE_INSECURE=1` does, as an option: serve on every interface, without a secret.
 * await using server = await TcpStoreServer.listen({
 *   hostname: "0.0.0.0",
 *   secret: "",
 *   insecure: true,
 *   log: () => {}, // (it warns)
 * });
 * assert.equal(server.authenticates, false);
 * ```
 */
export const STORE_INSECURE_ENV = "DCOMM_STORE_INSECURE";

/**
 * Whether {@linkcode STORE_INSECURE_ENV} is `1` and readable without a permission prompt.
 *
 * @returns `true` only when the variable is exactly `1`.
 */
export function insecureFromEnv(): boolean {
  const status = Deno.permissions.querySync({ name: "env", variable: STORE_INSECURE_ENV });
  return status.state === "granted" && Deno.env.get(STORE_INSECURE_ENV) === "1";
}

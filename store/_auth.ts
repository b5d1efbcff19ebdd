/**
 * Challenge–response over HMAC-SHA256 with WebCrypto: the server sends a random nonce, the client answers
 * HMAC-SHA256(secret, nonce), the server verifies it in constant time. The secret never travels.
 *
 * @module
 */

/** The HMAC-SHA256 key of a secret; `undefined` for no secret. */
export async function hmacKey(secret: string | undefined): Promise<CryptoKey | undefined> {
  if (!secret) return undefined;
  return await crypto.subtle.importKey(
    "raw",
    new TextEncoder().encode(secret),
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["sign", "verify"],
  );
}

/** HMAC-SHA256(secret, nonce): the client's answer to the server's challenge. */
export async function answerChallenge(key: CryptoKey, nonce: Uint8Array): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.sign("HMAC", key, nonce as Uint8Array<ArrayBuffer>));
}

/** Whether `answer` is HMAC-SHA256(secret, nonce), compared in constant time. */
export async function checkAnswer(key: CryptoKey, nonce: Uint8Array, answer: Uint8Array): Promise<boolean> {
  return await crypto.subtle.verify(
    "HMAC",
    key,
    answer as Uint8Array<ArrayBuffer>,
    nonce as Uint8Array<ArrayBuffer>,
  );
}

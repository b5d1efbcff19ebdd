/**
 * The one place that names TensorFlow.js: the same specifier a training script imports
 * (`npm:@tensorflow/tfjs@4.22.0`), so that Deno's npm resolution hands both the same module instance — one
 * tfjs-core, one engine, one kernel registry — and the classes dcomm extends (`tf.Optimizer`,
 * `tf.Callback`) are the user's own.
 *
 * @module
 */
export * from "npm:@tensorflow/tfjs@4.22.0";

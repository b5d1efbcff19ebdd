"""The Gloo peer of `deno task bench:collectives --peer gloo`: PyTorch's Gloo all-reduce over the same
sizes and ranks, started by dcomm's launcher (torchrun's environment), timed as dcomm's harness times
(bench/_harness.ts, nccl-tests' way): the input written once per size, `warmup` untimed calls, then
`iters` calls timed back to back with nothing else in the loop; then the input written again and one more
call checked (an in-place sum changes its own input). Rank 0 prints one JSON line per size:
{"bytes", "timeUs", "wrong"}; time is the slowest rank's mean over the timed calls."""
import json
import sys
import time

import torch
import torch.distributed as dist


def main() -> None:
    min_bytes, max_bytes, factor = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    iters, warmup = int(sys.argv[4]), int(sys.argv[5])
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    nbytes = min_bytes
    while nbytes <= max_bytes:
        # The harness's all-reduce count: whole float32s, at least one.
        count = max(1, nbytes // 4)
        index = torch.arange(count)
        # The harness's data: (j + 5 rank) mod 13, exact in float32 when summed in any order.
        init = ((index + 5 * rank) % 13).to(torch.float32)
        expected = sum(((index + 5 * r) % 13) for r in range(size)).to(torch.float32)
        t = init.clone()
        for _ in range(warmup):
            dist.all_reduce(t)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        mine = torch.tensor([(time.perf_counter() - start) / iters])
        t.copy_(init)
        dist.all_reduce(t)
        wrong = torch.tensor([float((t != expected).sum())])
        dist.all_reduce(mine, op=dist.ReduceOp.MAX)
        dist.all_reduce(wrong)
        if rank == 0:
            print(json.dumps({"bytes": count * 4, "timeUs": mine.item() * 1e6, "wrong": wrong.item()}), flush=True)
        nbytes = max(nbytes + 1, int(nbytes * factor))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

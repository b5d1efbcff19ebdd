"""The Gloo peer of `deno task bench:collectives --peer gloo`: PyTorch's Gloo all-reduce over the same
sizes and ranks, started by dcomm's launcher (torchrun's environment). Rank 0 prints one JSON line per
size: {"bytes", "timeUs", "wrong"}; time is the slowest rank's mean over the iterations."""
import json
import sys
import time

import torch
import torch.distributed as dist


def main() -> None:
    min_bytes, max_bytes, factor, iters, warmup = (int(x) for x in sys.argv[1:6])
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    nbytes = min_bytes
    while nbytes <= max_bytes:
        count = max(1, nbytes // 4 // size) * size
        t = torch.empty(count, dtype=torch.float32)
        base = (torch.arange(count) % 13).to(torch.float32)
        for _ in range(warmup):
            t.copy_(base + rank)
            dist.all_reduce(t)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            t.copy_(base + rank)
            dist.all_reduce(t)
        mine = torch.tensor([(time.perf_counter() - start) / iters])
        expected = base * size + size * (size - 1) / 2
        wrong = torch.tensor([float((t != expected).sum())])
        dist.all_reduce(mine, op=dist.ReduceOp.MAX)
        dist.all_reduce(wrong)
        if rank == 0:
            print(json.dumps({"bytes": count * 4, "timeUs": mine.item() * 1e6, "wrong": wrong.item()}), flush=True)
        nbytes *= factor
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

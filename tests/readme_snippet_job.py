"""A real 2-process gloo job that profiles itself with docs/profiler.md's snippet, as written.

``python tests/readme_snippet_job.py WORKDIR [STEPS]``: two ranks (torch.multiprocessing, CPU, gloo) each build a
DDP-wrapped tiny transformer, its DeviceMesh, an AdamW and a loader of ``STEPS`` batches (default 8), then run the
first ``python`` block of docs/profiler.md with ``WORKDIR`` as the working folder: the traces land in
``WORKDIR/runs/exp1``. The snippet's names (``model``, ``mesh``, ``opt``, ``loader``, ``train_step``, ``torch``)
are what a training script would have; nothing else is added to it."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "profiler.md"


def snippet() -> str:
    """The first fenced ``python`` block of docs/profiler.md."""
    m = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert m, f"{DOC}: no python block"
    return m.group(1)


def _worker(rank: int, workdir: str, port: int, steps: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.nn.parallel import DistributedDataParallel as DDP

    sys.path.insert(0, str(REPO))
    from fixtures.model import Dims, TinyTransformer, lm_loss

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        d = Dims()
        torch.manual_seed(0)
        mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("dp",))
        model = DDP(TinyTransformer(d))
        opt = torch.optim.AdamW(model.parameters())
        g = torch.Generator().manual_seed(rank)
        loader = [torch.randint(0, d.vocab, (d.micro_batch, d.seq + 1), generator=g) for _ in range(steps)]

        def train_step(batch):
            opt.zero_grad()
            lm_loss(model(batch[:, :-1]), batch[:, 1:]).backward()
            opt.step()

        os.chdir(workdir)
        exec(compile(snippet(), str(DOC), "exec"),
             {"torch": torch, "model": model, "mesh": mesh, "opt": opt, "loader": loader, "train_step": train_step})
        dist.barrier()
    finally:
        dist.destroy_process_group()


def main(workdir: str, steps: int = 8, timeout_s: float = 240) -> None:
    sys.path.insert(0, str(REPO))
    from fixtures.generate import _free_port, spawn_within

    spawn_within(_worker, (workdir, _free_port(), steps), 2, timeout_s, "the profiled job")


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))

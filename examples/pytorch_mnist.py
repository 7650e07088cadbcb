"""Data-parallel training with hvd_selector.torch, Horovod's pytorch_mnist
example in shape, on synthetic MNIST-sized data (nothing is downloaded).

    hvd-selector run -np 2 python examples/pytorch_mnist.py --epochs 2

Each rank trains on its own shard; DistributedOptimizer averages gradients,
so every rank ends with the same parameters (--out DIR saves them).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import hvd_selector.torch as hvd


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, kernel_size=5)
        self.conv2 = nn.Conv2d(8, 16, kernel_size=5)
        self.fc1 = nn.Linear(256, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = F.relu(self.fc1(x.flatten(1)))
        return F.log_softmax(self.fc2(x), dim=1)


def synthetic_mnist(samples: int, seed: int) -> torch.utils.data.TensorDataset:
    """28x28 noise images, each with a bright 6x6 patch where its label puts it (learnable)."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (samples,), generator=g)
    images = torch.rand(samples, 1, 28, 28, generator=g) * 0.5
    for i, label in enumerate(labels.tolist()):
        row, col = 3 + 12 * (label // 5), 1 + 5 * (label % 5)
        images[i, 0, row : row + 6, col : col + 6] += 1.0
    return torch.utils.data.TensorDataset(images, labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--samples", type=int, default=1024)
    parser.add_argument("--fp16-allreduce", action="store_true", help="compress gradients to float16")
    parser.add_argument("--out", type=Path, help="save each rank's final parameters here")
    args = parser.parse_args()

    hvd.init()
    torch.manual_seed(1234 + hvd.rank())  # different on purpose: broadcast makes them equal
    torch.set_num_threads(1)

    dataset = synthetic_mnist(args.samples, seed=42)
    sampler = torch.utils.data.distributed.DistributedSampler(dataset, num_replicas=hvd.size(), rank=hvd.rank())
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

    model = Net()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), args.out / f"initial.rank{hvd.rank()}.pt")
    # Horovod's recipe: scale the learning rate by the number of ranks.
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.5)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(), compression=compression)

    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)
        model.train()
        total = torch.zeros(())
        for images, labels in loader:
            optimizer.zero_grad()
            loss = F.nll_loss(model(images), labels)
            loss.backward()
            optimizer.step()
            total += loss.detach()
        mean = hvd.allreduce(total / len(loader), name="epoch_loss")
        if hvd.rank() == 0:
            print(f"epoch {epoch}: mean loss {mean.item():.4f} over {hvd.size()} ranks", flush=True)

    if args.out:
        torch.save(model.state_dict(), args.out / f"params.rank{hvd.rank()}.pt")
    hvd.shutdown()


if __name__ == "__main__":
    main()

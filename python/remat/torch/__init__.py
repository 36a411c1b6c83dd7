"""PyTorch front ends of remat (pure Python; no compiled bindings needed here)."""

from remat.torch.joint import export_joint, pytorch_min_cut

__all__ = ["export_joint", "pytorch_min_cut"]

"""PyTorch front ends of remat: the joint-graph exporter and a partition
function for AOTAutograd (pure Python; the partitioner runs the ``remat``
binary unless given another solver)."""

from remat.torch.joint import export_joint, pytorch_min_cut
from remat.torch.partition import RematSolverError, partitioner

__all__ = ["RematSolverError", "export_joint", "partitioner", "pytorch_min_cut"]

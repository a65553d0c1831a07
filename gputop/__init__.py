"""gputop: a terminal dashboard for NVIDIA GPUs, one machine or a whole lab."""

__version__ = "0.1.0"

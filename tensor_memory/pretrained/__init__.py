"""Tensor Memory on a real pretrained Transformer, all-MiniLM-L6-v2: attaching it (``minilm``), the
cross-window recall task and model (``recall``), and its checkpoints (``checkpoint``)."""

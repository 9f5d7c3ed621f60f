"""What is read and written, and checked: checkpoints and the files around them.

``checkpoint`` (save and load a task model with its config) · ``integrity`` (what the weights file records of the
config it was trained with, and the checks against it) · ``files`` (atomic writes, JSON) · ``user_files`` (reading a
file a user names: regular files only, size caps, safetensors checked by hand, never unpickled).
"""

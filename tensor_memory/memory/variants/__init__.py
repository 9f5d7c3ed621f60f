"""The components a :class:`~tensor_memory.memory.config.MemoryConfig` chooses for each step of the layer.

``addressing`` (step 2: tanh or soft-argmax coordinates, a read head of its own, path-integrated writes) ·
``reading`` (3: the trilinear sample, jittered gradients, voxel codes) · ``writing`` (4: the Gaussian profile, cut to a
box, or the nearest voxel) · ``updating`` (5: three taps or one, depthwise biases, every cell or the written region) ·
``interface`` (how tokens come in and the result goes out: the paper's way, or its public code's). With a default
config each is the mechanism as written.
"""

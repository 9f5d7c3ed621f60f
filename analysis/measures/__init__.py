"""Measures of a memory, pure functions of checkpoints and traces: addressing, occlusion belief, the world read
out of it, interventions, volumes, one mechanism step, causality, comparisons, images and text."""

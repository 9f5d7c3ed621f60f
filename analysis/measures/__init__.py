"""Measures of a memory: addressing, occlusion belief, the world read out of it, interventions, one mechanism step."""

"""Encoders (PyG GNNs, timm backbones), heads, augmentations and random walks."""

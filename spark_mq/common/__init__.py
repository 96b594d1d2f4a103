"""Pieces shared by every layer: message model and codecs, config loading, errors."""

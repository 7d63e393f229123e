"""Twinkle."""

"""Small shared utilities; ``remote_class`` gives a class a Ray-actor constructor."""

from twinkle.utils.remote import ensure_ray, remote_class

__all__ = ["ensure_ray", "remote_class"]

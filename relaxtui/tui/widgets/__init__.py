"""Widgets of the chat app; each renders one thing."""

"""Pulumi ComponentResources of gpuhosts, each over pure render functions."""

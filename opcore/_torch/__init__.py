"""Torch support shared by every torch-based backend. Importing this package imports torch;
the core imports it only when a torch tensor is seen or a torch backend loads.
"""

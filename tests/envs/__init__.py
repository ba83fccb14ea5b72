"""Tests for the envs package."""

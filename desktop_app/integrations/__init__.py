"""Bring-your-own-framework integrations (optional extras): each subpackage
imports its framework, and nothing outside it does."""

"""The API behind a real Keystone: tenant isolation and service tokens."""

"""RS256 tokens and JSON Web Keys built by hand with `cryptography`: base64url header and
claims, signed with PKCS#1 v1.5 over SHA-256 (RFC 7515, 7517, 7518)."""

from __future__ import annotations

import base64
import json
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def sign(key: rsa.RSAPrivateKey, kid: str, claims: dict[str, Any]) -> str:
    """An RS256 JWS in compact form."""
    header = {"alg": "RS256", "typ": "JWT", "kid": kid}
    signing_input = ".".join(
        b64url(json.dumps(part, separators=(",", ":")).encode()) for part in (header, claims)
    )
    signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{b64url(signature)}"


def _int_bytes(n: int) -> bytes:
    return n.to_bytes((n.bit_length() + 7) // 8, "big")


def jwk(key: rsa.RSAPrivateKey, kid: str) -> dict[str, str]:
    """The public half of `key` as a JSON Web Key."""
    numbers = key.public_key().public_numbers()
    return {
        "kty": "RSA",
        "alg": "RS256",
        "use": "sig",
        "kid": kid,
        "n": b64url(_int_bytes(numbers.n)),
        "e": b64url(_int_bytes(numbers.e)),
    }

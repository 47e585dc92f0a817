"""The deployment's CA (issue 27): made on first use, its key encrypted like host
credentials. Sandboxes trust its certificate; the proxy signs with it the certificates of the
hosts whose TLS it intercepts (those a secret is bound to)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import IntegrityError, transaction

from hosts import crypto
from sandboxes.models import EgressAuthority

if TYPE_CHECKING:
    from egress.ca import CertificateAuthority

CA_NAME = "default"
CA_COMMON_NAME = "Sandhub egress CA"


def authority() -> EgressAuthority:
    """The CA's row, made now if there is none yet; two processes making it at once keep
    the first one's (the name is unique, the loser reads the winner's)."""
    row = EgressAuthority.objects.filter(name=CA_NAME).first()
    if row is not None:
        return row
    # Imported on use: the proxy's package pulls in the TLS code only where a CA is made.
    from egress.ca import generate_ca

    cert_pem, key_pem = generate_ca(CA_COMMON_NAME)
    try:
        with transaction.atomic():
            return EgressAuthority.objects.create(
                name=CA_NAME, cert_pem=cert_pem, key_encrypted=crypto.encrypt(key_pem)
            )
    except IntegrityError:
        return EgressAuthority.objects.get(name=CA_NAME)


def ca_certificate() -> str:
    """The certificate (PEM) sandboxes trust."""
    return authority().cert_pem


def certificate_authority() -> CertificateAuthority:
    """The CA as the proxy signs with it."""
    from egress.ca import CertificateAuthority

    row = authority()
    return CertificateAuthority(row.cert_pem, crypto.decrypt(row.key_encrypted))

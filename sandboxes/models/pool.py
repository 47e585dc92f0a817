"""Warm-pool members: started containers waiting to become sandboxes."""

from __future__ import annotations

from django.db import models

from hosts.models import Host, Image
from sandboxes.models.ids import new_pool_id
from sandboxes.models.sandbox import Sandbox


class WarmContainerStatus(models.TextChoices):
    PROVISIONING = "provisioning"
    READY = "ready"
    CLAIMED = "claimed"


class WarmContainer(models.Model):
    """One warm-pool member: a started, unowned sandbox container on a host, for an image.

    `pool_id` is the id written on the container and its volume at creation (Docker labels
    never change), so this row is what ties a claimed container to its sandbox: reconciliation
    keeps a container whose pool id belongs to a ready member or to a live sandbox's claim.
    `slot` (0..pool size - 1) is unique per host and image while the member is unclaimed, so
    concurrent refills cannot overfill a pool; a claim frees the slot (NULLs never collide).
    """

    pool_id = models.CharField(max_length=32, unique=True, default=new_pool_id, editable=False)
    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="warm_containers")
    image = models.ForeignKey(Image, on_delete=models.CASCADE, related_name="warm_containers")
    slot = models.PositiveIntegerField(null=True, blank=True)
    status = models.CharField(
        max_length=12,
        choices=WarmContainerStatus.choices,
        default=WarmContainerStatus.PROVISIONING,
        db_index=True,
    )
    backend_state = models.JSONField(default=dict, blank=True)
    sandbox = models.OneToOneField(
        Sandbox,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="warm_container",
        help_text="The sandbox that claimed this container.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    ready_at = models.DateTimeField(null=True, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["host", "image", "slot", "created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["host", "image", "slot"], name="one_warm_container_per_slot"
            )
        ]

    def __str__(self) -> str:
        return f"{self.pool_id} ({self.status})"

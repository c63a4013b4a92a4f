"""Forget the stored submissions of people who never enrolled in the linked study.

Before, a sync stored every submission of the Prolific study, those of people who never came
through this study's crowd URL included (another lab's participants when a Prolific study was
shared). They are no longer stored, listed or acted on; this removes the rows stored earlier
(a sync would remove them too, but closed studies are not synced)."""

from django.db import migrations
from django.db.models import F, Q


def forget_unmatched(apps, schema_editor):
    Submission = apps.get_model("prolific", "ProlificSubmission")
    Submission.objects.exclude(
        Q(enrollment__study=F("link__study")) & Q(enrollment__rater__study=F("link__study"))
    ).delete()


class Migration(migrations.Migration):
    dependencies = [("prolific", "0001_initial")]

    operations = [migrations.RunPython(forget_unmatched, migrations.RunPython.noop)]

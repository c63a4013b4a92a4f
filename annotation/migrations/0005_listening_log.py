# The listening log of media stimuli: plays, seconds heard, seeks, heard to the end, per slot.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('annotation', '0004_judgment_indexes'),
        ('evalstudy', '0010_media'),
    ]

    operations = [
        migrations.CreateModel(
            name='ListeningLog',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('which', models.CharField(choices=[('item', "The item's media"), ('a', "The (first) output's media"), ('b', "Output B's media")], max_length=4)),
                ('duration_s', models.FloatField(help_text="The file's duration when the log started.")),
                ('plays', models.PositiveIntegerField(default=0)),
                ('seeks', models.PositiveIntegerField(default=0)),
                ('seconds_listened', models.FloatField(default=0)),
                ('intervals', models.JSONField(blank=True, default=list)),
                ('completed', models.BooleanField(default=False)),
                ('started_at', models.DateTimeField()),
                ('updated_at', models.DateTimeField()),
                ('slot', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='listening', to='evalstudy.assignmentslot')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('slot', 'which'), name='listening_slot_which')],
            },
        ),
    ]

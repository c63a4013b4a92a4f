# Media stimuli: audio and video files of items (and outputs), and the study's player options.

import django.db.models.deletion
from django.db import migrations, models

import evalstudy.models


class Migration(migrations.Migration):

    dependencies = [
        ('evalstudy', '0009_study_language_labels_alignment'),
    ]

    operations = [
        migrations.AddField(
            model_name='study',
            name='media_must_finish',
            field=models.BooleanField(default=False, help_text='Raters must hear (or watch) each item\'s media to the end before they can answer it.'),
        ),
        migrations.AddField(
            model_name='study',
            name='media_max_plays',
            field=models.PositiveIntegerField(blank=True, help_text="How many times a rater may play each item's media (blank: no limit).", null=True),
        ),
        migrations.AddField(
            model_name='study',
            name='media_autoplay',
            field=models.BooleanField(default=False, help_text="Start playing an item's media as soon as the item is shown."),
        ),
        migrations.CreateModel(
            name='ItemMedia',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('kind', models.CharField(choices=[('audio', 'Audio'), ('video', 'Video')], max_length=5)),
                ('file', models.FileField(max_length=200, upload_to=evalstudy.models.media_file_name)),
                ('mime', models.CharField(help_text='Served as this Content-Type.', max_length=40)),
                ('container', models.CharField(max_length=20)),
                ('codec', models.CharField(max_length=40)),
                ('duration_s', models.FloatField()),
                ('channels', models.PositiveSmallIntegerField(blank=True, null=True)),
                ('sample_rate', models.PositiveIntegerField(blank=True, null=True)),
                ('width', models.PositiveIntegerField(blank=True, null=True)),
                ('height', models.PositiveIntegerField(blank=True, null=True)),
                ('size_bytes', models.PositiveBigIntegerField()),
                ('sha256', models.CharField(max_length=64)),
                ('source', models.CharField(blank=True, help_text="Where it came from: the path or URL in the imported file, or the uploaded file's name.", max_length=1000)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('item', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='media', to='evalstudy.item')),
                ('output', models.ForeignKey(blank=True, help_text="Empty: the item's media (shown with every output of it).", null=True, on_delete=django.db.models.deletion.CASCADE, related_name='media', to='evalstudy.output')),
            ],
            options={
                'verbose_name_plural': 'item media',
                'ordering': ['item_id', 'output_id', 'id'],
                'constraints': [
                    models.UniqueConstraint(condition=models.Q(('output__isnull', True)), fields=('item',), name='item_media_one_per_item'),
                    models.UniqueConstraint(condition=models.Q(('output__isnull', False)), fields=('output',), name='item_media_one_per_output'),
                    models.CheckConstraint(condition=models.Q(('kind__in', ['audio', 'video'])), name='item_media_kind_valid'),
                    models.CheckConstraint(condition=models.Q(('duration_s__gt', 0)), name='item_media_duration_positive'),
                ],
            },
        ),
    ]

"""Prolific operations through its REST API: a study's link to its Prolific study, submissions
synced and matched to enrolments, seats of returned and timed-out participants freed, approvals,
rejections and bonuses."""

"""Every place the open check can name for a problem has a page that fixes it."""

from evalstudy.admin.study_actions import _FIXES
from evalstudy.services import checks


def test_every_place_a_problem_names_has_a_fix():
    places = {checks.ITEMS, checks.SYSTEMS, checks.CRITERIA, checks.CALIBRATION,
              checks.ATTENTION, checks.SETTINGS, checks.DESIGN, checks.PLAN}
    assert places <= set(_FIXES)

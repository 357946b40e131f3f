"""The Lesson's steps, by what they hold: `readings` (measurements and the words for them), `syllabus` (each step's
title, claim and prepared input), `frame` (a step, its question, the pieces it draws with), one module per group of
steps, and `steps` (the list of steps, each outline paired with its drawing), which nothing here imports."""

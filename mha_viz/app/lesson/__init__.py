"""The Lesson's steps, by what they hold: `readings` (measurements and the words for them), `frame` (a step, its
question, the pieces it draws with), one module per group of steps, and `lesson_steps` (the list of steps) above."""

"""mha-viz. `python app.py [streamlit options]` (what `make run` does) starts the server and, at the same time, loads
the default model, so the first visitor does not wait for it. `streamlit run app.py` works too (AppTest runs it that
way); it loads the model when the first visitor arrives."""
import sys

if __name__ == "__main__" and "streamlit" not in sys.modules:  # a program, not a script run by streamlit
    import threading

    def _warm_up() -> None:
        from mha_viz.app.page import warm_up  # imported here: torch and transformers load beside the server

        warm_up()

    threading.Thread(target=_warm_up, name="mha-viz-warm-up", daemon=True).start()
    from streamlit.web import cli

    sys.argv = ["streamlit", "run", __file__, *sys.argv[1:]]
    sys.exit(cli.main())

from mha_viz.app import main  # noqa: E402

main()

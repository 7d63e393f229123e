"""One default chain: the library, `twinkle curate` and the curation flow read one constant."""

import inspect

from twinkle.preprocessor.chain import DEFAULT_CHAIN, FILTERS, build_pipeline


def test_build_pipeline_defaults_to_the_chain():
    assert inspect.signature(build_pipeline).parameters["names"].default is DEFAULT_CHAIN
    assert [s.name for s in build_pipeline()] == list(DEFAULT_CHAIN)


def test_cli_curate_defaults_to_the_chain():
    from twinkle.cli.curate import curate

    option = next(p for p in curate.params if p.name == "filters")
    assert option.default == ",".join(DEFAULT_CHAIN)


def test_flow_defaults_are_the_chain_with_dedup_as_its_own_stage():
    from flows.params import DEFAULT_FILTERS, CurationParams

    params = CurationParams()
    # The flow runs the global steps as its dedup stage, then the per-batch filters.
    global_steps = (["dedup"] if params.dedup else []) + (
        ["neardedup"] if params.near_dedup else []
    )
    assert global_steps + params.filters == list(DEFAULT_CHAIN)
    assert params.filters == DEFAULT_FILTERS
    assert not any(FILTERS[name][2] for name in params.filters)

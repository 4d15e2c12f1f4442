"""ptxas.assemble puts many PTX texts in one module per ptxas start, and still reports each text's own verdict:
names two texts share stay apart, a text cannot borrow another's definition, a rejected module is assembled
again text by text, and a text declaring an external function is assembled alone."""

import subprocess

import pytest

from jitorch.codegen.nvptx import ptxas

pytestmark = pytest.mark.skipif(ptxas.find_ptxas() is None, reason="no ptxas")

HEADER = ".version 7.0\n.target sm_80\n.address_size 64\n\n"
# One kernel and one global table, named as every jitorch module names its first kernel and the math tables.
KERNEL = HEADER + """.global .align 4 .b8 jitorch_$_table[8] = {1, 2, 3, 4, 5, 6, 7, 8};

.visible .entry jitorch_k0_pointwise(
	.param .u64 jitorch_k0_pointwise_param_0
)
{
	.reg .b32 	%r<2>;
	.reg .b64 	%rd<3>;
	ld.param.u64 	%rd1, [jitorch_k0_pointwise_param_0];
	cvta.to.global.u64 	%rd2, %rd1;
	ld.global.u32 	%r1, [jitorch_$_table];
	add.s32 	%r1, %r1, VALUE;
	st.global.u32 	[%rd2], %r1;
	ret;
}
"""
HELPER = HEADER + """.func helper()
{
	ret;
}

.visible .entry jitorch_k1_pointwise()
{
	call.uni helper, ();
	ret;
}
"""
# Calls the helper without defining it: rejected alone, and so together with the text that defines one.
BORROWER = HEADER + """.visible .entry jitorch_k2_pointwise()
{
	call.uni helper, ();
	ret;
}
"""
EXTERN = HEADER + """.extern .func (.param .b32 func_retval0) vprintf(.param .b64 vprintf_param_0, .param .b64 vprintf_param_1);

.visible .entry jitorch_k3_pointwise()
{
	ret;
}
"""


@pytest.fixture
def starts(monkeypatch):
    """The PTX files of each ptxas start."""
    started, run = [], subprocess.run

    def counted(args, **kwargs):
        started.append(open(args[2]).read())
        return run(args, **kwargs)
    monkeypatch.setattr(ptxas.subprocess, "run", counted)
    return started


def test_texts_sharing_names_are_assembled_together(starts):
    texts = [KERNEL.replace("VALUE", str(i)) for i in range(10)] + [HELPER]
    assert ptxas.assemble(texts, jobs=2) == [None] * 11
    assert len(starts) == 2  # one module per worker, each holding several texts
    assert all(m.count(".version") == 1 for m in starts)
    assert sum(m.count(".entry jitorch_k0_pointwise$t") for m in starts) == 10


def test_a_rejected_text_gets_its_own_error_and_the_others_none(starts):
    bad = KERNEL.replace("VALUE", "1").replace("ret;", "retx;")
    texts = [KERNEL.replace("VALUE", "0"), bad, KERNEL.replace("VALUE", "2")]
    errors = ptxas.assemble(texts, jobs=1)
    assert errors[0] is None and errors[2] is None
    assert "error" in errors[1] and "$t" not in errors[1]  # ptxas's message on the text as written
    assert len(starts) == 4  # the module, then each text alone


def test_a_text_cannot_use_a_definition_of_another(starts):
    errors = ptxas.assemble([HELPER, BORROWER], jobs=1)
    assert errors[0] is None and "helper" in errors[1]


def test_a_text_declaring_an_external_function_is_assembled_alone(starts):
    texts = [KERNEL.replace("VALUE", "0"), EXTERN, KERNEL.replace("VALUE", "1")]
    assert ptxas.assemble(texts, jobs=1) == [None] * 3
    assert EXTERN in starts and len(starts) == 2

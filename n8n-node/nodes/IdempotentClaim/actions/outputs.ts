import type { ExpressionString } from 'n8n-workflow';

/** Claim's outputs while "Separate Conflict and In-Progress Outputs" is off. */
export const CLAIM_OUTPUT_NAMES = ['Won', 'Duplicate'] as const;

/** Claim's outputs while "Separate Conflict and In-Progress Outputs" is on. */
export const SEPARATED_CLAIM_OUTPUT_NAMES = [
	'Won',
	'Duplicate',
	'Conflict',
	'In Progress',
] as const;

export const WON = 0;
export const DUPLICATE = 1;
export const CONFLICT = 2;
export const IN_PROGRESS = 3;

/**
 * Output index for a claim outcome. Only `won` reaches Won; everything else,
 * including an outcome this version does not know, goes where the protected
 * node is not run.
 */
export function claimOutputIndex(outcome: unknown, separate: boolean): number {
	if (outcome === 'won') return WON;
	if (separate) {
		if (outcome === 'conflict') return CONFLICT;
		if (outcome === 'in_progress' || outcome === 'retry_later') return IN_PROGRESS;
	}
	return DUPLICATE;
}

export interface OutputLayout {
	count: number;
	/**
	 * Output that receives failed items when the node's "On Error" setting is
	 * "Continue" (regular output). For Claim it is never Won: a failed claim
	 * must not run the protected node. With separate outputs it is In Progress,
	 * whose meaning ("not decided now, deliver again later") fits a failure.
	 */
	errorOutput: number;
}

/** Output count and error output of an operation. */
export function outputLayout(operation: string, separate: boolean): OutputLayout {
	if (operation !== 'claim') return { count: 1, errorOutput: 0 };
	return separate
		? { count: SEPARATED_CLAIM_OUTPUT_NAMES.length, errorOutput: IN_PROGRESS }
		: { count: CLAIM_OUTPUT_NAMES.length, errorOutput: DUPLICATE };
}

function mainOutputs(names: readonly string[]): string {
	return JSON.stringify(names.map((displayName) => ({ type: 'main', displayName })));
}

/**
 * Node outputs as an expression over the node's parameters, evaluated by n8n
 * (editor and runtime) like the Switch node's configured outputs: one output
 * for every operation but Claim; Won and Duplicate for Claim, plus Conflict
 * and In Progress when the toggle is on.
 */
export const OUTPUTS_EXPRESSION: ExpressionString = `={{ ($parameter.operation || "claim") !== "claim" ? [{"type":"main"}] : $parameter.separateConflictOutputs === true ? ${mainOutputs(SEPARATED_CLAIM_OUTPUT_NAMES)} : ${mainOutputs(CLAIM_OUTPUT_NAMES)} }}`;

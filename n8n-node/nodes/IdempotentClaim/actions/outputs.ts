import type { ExpressionString, IExecuteFunctions, NodeHint } from 'n8n-workflow';

import { nodeParameter } from '../helpers/parameters';

/**
 * Claim's outputs in node version 1 while "Separate Conflict and
 * In-Progress Outputs" is off (its default): every outcome but won leaves
 * by Duplicate, in_progress and retry_later included.
 */
export const CLAIM_OUTPUT_NAMES = ['Won', 'Duplicate'] as const;

/** Claim's outputs in node version 1 while "Separate Conflict and In-Progress Outputs" is on. */
export const SEPARATED_CLAIM_OUTPUT_NAMES = [
	'Won',
	'Duplicate',
	'Conflict',
	'In Progress',
] as const;

/**
 * Claim's outputs from node version 2, always: in_progress and retry_later
 * never share an output with duplicate (they must not be answered 2xx), and
 * a claim that could not be decided never leaves by an outcome output. The
 * first four are version 1's separated outputs, in the same places.
 */
export const CLAIM_V2_OUTPUT_NAMES = [...SEPARATED_CLAIM_OUTPUT_NAMES, 'Error'] as const;

export const WON = 0;
export const DUPLICATE = 1;
export const CONFLICT = 2;
export const IN_PROGRESS = 3;
/** Version 2's Error output. */
export const ERROR = 4;

/**
 * Whether Claim's conflict and in-progress outcomes leave by their own
 * outputs: always from node version 2; in version 1 when its toggle is on.
 */
export function separatesOutcomes(nodeVersion: number, toggle: unknown): boolean {
	return nodeVersion >= 2 || toggle === true;
}

/**
 * Whether this Claim node's conflict and in-progress outcomes leave by
 * their own outputs (separatesOutcomes); the version 1 toggle is read only
 * for a version 1 node (a version 2 node does not store it).
 */
export function claimSeparatesOutcomes(this: IExecuteFunctions, nodeVersion: number): boolean {
	return separatesOutcomes(
		nodeVersion,
		nodeVersion >= 2 ? undefined : nodeParameter.call(this, 'separateConflictOutputs', 0, false),
	);
}

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
	 * Output that receives failed items when the node's "On Error" setting
	 * is "Continue" (regular output); with "Continue (using error output)"
	 * n8n moves them from there to the Error output it adds. For Claim it is
	 * never Won: a failed claim must not run the protected node. Version 2
	 * has an Error output for them. Version 1 (kept as it was, for saved
	 * workflows) sends them to In Progress with separate outputs, else to
	 * Duplicate.
	 */
	errorOutput: number;
}

/** Output count and error output of an operation in a node version. */
export function outputLayout(operation: string, separate: boolean, nodeVersion = 1): OutputLayout {
	if (operation !== 'claim') return { count: 1, errorOutput: 0 };
	if (nodeVersion >= 2) return { count: CLAIM_V2_OUTPUT_NAMES.length, errorOutput: ERROR };
	return separate
		? { count: SEPARATED_CLAIM_OUTPUT_NAMES.length, errorOutput: IN_PROGRESS }
		: { count: CLAIM_OUTPUT_NAMES.length, errorOutput: DUPLICATE };
}

function mainOutputs(names: readonly string[]): string {
	return JSON.stringify(names.map((displayName) => ({ type: 'main', displayName })));
}

/**
 * Node outputs as an expression over the node's parameters and version,
 * evaluated by n8n (editor and runtime) like the Switch node's configured
 * outputs: one output for every operation but Claim; for Claim, version 2's
 * five outputs, or in version 1 Won and Duplicate, plus Conflict and In
 * Progress when the toggle is on.
 */
export const OUTPUTS_EXPRESSION: ExpressionString = `={{ ($parameter.operation || "claim") !== "claim" ? [{"type":"main"}] : !($nodeVersion < 2) ? ${mainOutputs(CLAIM_V2_OUTPUT_NAMES)} : $parameter.separateConflictOutputs === true ? ${mainOutputs(SEPARATED_CLAIM_OUTPUT_NAMES)} : ${mainOutputs(CLAIM_OUTPUT_NAMES)} }}`;

const IS_CLAIM = '($parameter.operation || "claim") === "claim"';

/** What a webhook workflow answers the provider, per output of Claim. */
const ANSWERS =
	'<b>Won</b>: run the protected node, Complete, answer 2xx (5xx after Fail). ' +
	'<b>Duplicate</b> (also stale, dead-lettered, unknown): 2xx, with <code>idempotency.result_ref</code>. ' +
	'<b>Conflict</b>: 2xx, and alert. ' +
	'<b>In Progress</b>: 409 (in_progress) or 503 (retry_later) with Retry-After = <code>idempotency.retry_after_seconds</code>, never 2xx: the event is not done yet.';

/**
 * Hints shown in the node's output pane (as n8n's Remove Duplicates shows
 * its own): which HTTP answer each output of Claim should give a webhook
 * provider, and in version 1 without separate outputs a warning that
 * in-progress claims leave by Duplicate.
 */
export const NODE_HINTS: NodeHint[] = [
	{
		message:
			'Answer the webhook provider by output. ' +
			ANSWERS +
			' <b>Error</b> (the claim was not decided, e.g. the sidecar is unreachable; with On Error "Continue"): 503 with Retry-After, never 2xx. With On Error "Stop Workflow" the node fails and n8n answers 500; with "Continue (using error output)" such items leave by n8n\'s own Error output instead.',
		type: 'info',
		location: 'outputPane',
		whenToDisplay: 'always',
		displayCondition: `={{ ${IS_CLAIM} && !($nodeVersion < 2) }}`,
	},
	{
		message: 'Answer the webhook provider by output. ' + ANSWERS,
		type: 'info',
		location: 'outputPane',
		whenToDisplay: 'always',
		displayCondition: `={{ ${IS_CLAIM} && $nodeVersion < 2 && $parameter.separateConflictOutputs === true }}`,
	},
	{
		message:
			'In-progress and retry-later claims leave by <b>Duplicate</b> here. Never answer them 2xx: a provider that got 2xx does not deliver again, and if the execution holding the claim then fails, the event is lost. Turn on "Separate Conflict and In-Progress Outputs", or use a new Idempotent Claim node (version 2), where they always have their own output.',
		type: 'warning',
		location: 'outputPane',
		whenToDisplay: 'always',
		displayCondition: `={{ ${IS_CLAIM} && $nodeVersion < 2 && $parameter.separateConflictOutputs !== true }}`,
	},
];

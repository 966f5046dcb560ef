import type { Reporter, TestModule } from 'vitest/node';
import { defineConfig } from 'vitest/config';

/**
 * Ends the run with one plain "vitest: N passed, N failed[, N skipped]" line,
 * the summary form that CI logs are read for.
 */
const summaryLine: Reporter = {
	onTestRunEnd(testModules: ReadonlyArray<TestModule>) {
		const count = { passed: 0, failed: 0, skipped: 0 };
		for (const testModule of testModules) {
			for (const test of testModule.children.allTests()) {
				const state = test.result().state;
				if (state === 'passed' || state === 'failed' || state === 'skipped') count[state]++;
			}
		}
		const skipped = count.skipped > 0 ? `, ${count.skipped} skipped` : '';
		console.log(`vitest: ${count.passed} passed, ${count.failed} failed${skipped}`);
	},
};

export default defineConfig({
	resolve: {
		// Load the CommonJS build of n8n-workflow, as n8n does when it loads the
		// node, instead of its ES module build.
		alias: [{ find: /^n8n-workflow$/, replacement: 'n8n-workflow/dist/cjs/index.js' }],
	},
	test: {
		include: ['test/**/*.test.ts'],
		environment: 'node',
		reporters: ['default', summaryLine],
	},
});

// dsa-bench plan-grid: the planner's plan (or its error) for every combination of a fixed grid of
// shapes, SM counts, hints, caches and PlanChoice overrides, one line each, then a count and a
// hash of them all. Two builds whose hashes match plan alike: a planner refactor shows that it
// changes no plan with one number, and a planner change lists the shapes it moves (diff the lines).
#pragma once

namespace dsa::bench {

// Prints the lines (unless summary_only) and the summary; returns the process exit code.
int run_plan_grid(bool summary_only);

}  // namespace dsa::bench

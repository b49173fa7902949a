// Package pipeforge trains models through the PipeForge runtime (libpipeforge.so, via cgo).
//
//	model, err := pipeforge.NewMLP(pipeforge.MLPConfig{InputDim: 8, Hidden: []int64{32, 32}, Classes: 4})
//	if err != nil { ... }
//	defer model.Close()
//	trainer, err := pipeforge.NewTrainer(model, pipeforge.TrainerOptions{MicroBatches: 2, Seed: 1, LR: 1e-2})
//	if err != nil { ... }
//	defer trainer.Close()
//	result, err := trainer.Step(pipeforge.Float32(x, 16, 8), pipeforge.Int32(y, 16))
//
// Pipeline schedules: generate or parse one, then simulate it under a cost model.
//
//	schedule, err := pipeforge.GenerateSchedule("1f1b", pipeforge.ScheduleOptions{Stages: 4, MicroBatches: 8})
//	if err != nil { ... }
//	defer schedule.Close()
//	sim, err := schedule.Simulate(pipeforge.DefaultCostModel())
//	if err != nil { ... }
//	defer sim.Close()
//	fmt.Println(sim.Summary().BubbleRate, sim.Ranks()[0].PeakActivations)
//
// Every fallible call returns an error (a *pipeforge.Error with the runtime's code and message);
// nothing panics, and a panicking data loader is recovered and reported as a CallbackError.
// Objects are not safe for concurrent use. docs/BINDINGS.md has the details.
package pipeforge

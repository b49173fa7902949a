// A program in a module of its own that only requires the binding's module: trains an MLP with
// 1F1B on two ranks for 30 steps.
package main

import (
	"fmt"
	"log"

	pipeforge "github.com/pipeforge/pipeforge-go"
)

func main() {
	x, y := make([]float32, 16*8), make([]int32, 16)
	for i := range x {
		x[i] = float32(i*7%11)/11 - 0.5
	}
	for r := range y {
		if x[r*8] > x[r*8+1] {
			y[r] = 1
		}
	}
	model, err := pipeforge.NewMLP(pipeforge.MLPConfig{InputDim: 8, Hidden: []int64{32}, Classes: 2})
	if err != nil {
		log.Fatal(err)
	}
	defer model.Close()
	trainer, err := pipeforge.NewTrainer(model, pipeforge.TrainerOptions{MicroBatches: 4, LR: 1e-2, Schedule: "1f1b", Stages: 2})
	if err != nil {
		log.Fatal(err)
	}
	defer trainer.Close()
	var first, last float64
	for step := 0; step < 30; step++ {
		result, err := trainer.Step(pipeforge.Float32(x, 16, 8), pipeforge.Int32(y, 16))
		if err != nil {
			log.Fatal(err)
		}
		if step == 0 {
			first = result.Loss
		}
		last = result.Loss
	}
	fmt.Printf("pipeforge %s: loss %.4f -> %.4f\n", pipeforge.Version(), first, last)
	if !(last < first) {
		log.Fatal("the loss did not fall")
	}
}

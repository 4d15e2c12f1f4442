"""An LSTM word language model in the style of PyTorch's word_language_model example.

    python examples/programs/word_language_model.py
    python examples/programs/word_language_model.py --steps 5 --batch-size 4 --compile

Embedding, a two-layer LSTM with dropout, and a decoder whose weight is tied to the embedding,
trained with truncated backpropagation through time: the hidden state carries over from one
chunk to the next, detached so that gradients stop at the chunk boundary.
"""

import argparse
import math
import os
import tempfile

import jitorch as torch
import jitorch.nn as nn
import jitorch.nn.functional as F

CORPUS = (
    "the cat sat on the mat . the dog sat on the log . the cat saw the dog . "
    "the dog saw the cat on the mat . a bird sat on the dog . the bird saw a cat . "
) * 4


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=True):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:
            if nhid != ninp:
                raise ValueError("When using the tied flag, nhid must be equal to emsize")
            self.decoder.weight = self.encoder.weight
        self.nhid, self.nlayers = nhid, nlayers
        self.init_weights()

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        decoded = self.decoder(self.drop(output)).view(-1, self.decoder.out_features)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))


def repackage_hidden(h):
    """Detach hidden states from their history, so backprop stops at the chunk boundary."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def batchify(data, bsz, device):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous().to(device)


def get_batch(source, i, bptt):
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].reshape(-1)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--bptt", type=int, default=8)
    p.add_argument("--emsize", type=int, default=32)
    p.add_argument("--nlayers", type=int, default=2)
    p.add_argument("--dropout", type=float, default=0.2)
    p.add_argument("--lr", type=float, default=1.0)
    p.add_argument("--clip", type=float, default=0.25)
    p.add_argument("--seed", type=int, default=1111)
    p.add_argument("--words", type=int, default=10)
    p.add_argument("--compile", action="store_true")
    return p.parse_args(argv)


def evaluate(model, source, bptt, ntokens, batch_size):
    model.eval()
    total, hidden = 0.0, model.init_hidden(batch_size)
    with torch.no_grad():
        for i in range(0, source.size(0) - 1, bptt):
            data, targets = get_batch(source, i, bptt)
            output, hidden = model(data, hidden)
            total += len(data) * F.nll_loss(output, targets).item()
            hidden = repackage_hidden(hidden)
    return total / (len(source) - 1)


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    torch.cuda.manual_seed_all(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    words = CORPUS.split()
    vocab = sorted(set(words))
    word2idx = {w: i for i, w in enumerate(vocab)}
    ids = torch.tensor([word2idx[w] for w in words], dtype=torch.int64)
    train_data = batchify(ids, args.batch_size, device)
    ntokens = len(vocab)

    model = RNNModel(ntokens, args.emsize, args.emsize, args.nlayers, args.dropout).to(device)
    step_model = torch.compile(model) if args.compile else model
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.99)
    criterion = nn.NLLLoss()

    losses, step = [], 0
    model.train()
    hidden = model.init_hidden(args.batch_size)
    while step < args.steps:
        for i in range(0, train_data.size(0) - 1, args.bptt):
            if step == args.steps:
                break
            data, targets = get_batch(train_data, i, args.bptt)
            hidden = repackage_hidden(hidden)
            model.zero_grad()
            output, hidden = step_model(data, hidden)
            loss = criterion(output, targets)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())
            step += 1
        print(f"step {step:4d}: loss {losses[-1]:.3f}, lr {scheduler.get_last_lr()[0]:.3f}")
        hidden = model.init_hidden(args.batch_size)

    val_loss = evaluate(model, train_data, args.bptt, ntokens, args.batch_size)
    with tempfile.TemporaryDirectory() as out_dir:
        path = os.path.join(out_dir, "model.pt")
        with open(path, "wb") as f:
            torch.save(model.state_dict(), f)
        reloaded = RNNModel(ntokens, args.emsize, args.emsize, args.nlayers, args.dropout).to(device)
        with open(path, "rb") as f:
            reloaded.load_state_dict(torch.load(f, weights_only=True))
    reloaded_loss = evaluate(reloaded, train_data, args.bptt, ntokens, args.batch_size)
    print(f"eval loss {val_loss:.3f} (ppl {math.exp(val_loss):.2f}), reloaded {reloaded_loss:.3f}")

    hidden = model.init_hidden(1)
    input = torch.tensor([[word2idx["the"]]], dtype=torch.long, device=device)
    generated = []
    with torch.no_grad():
        for _ in range(args.words):
            output, hidden = model(input, hidden)
            word_weights = output.squeeze().div(1.0).exp()
            word_idx = torch.multinomial(word_weights, 1)[0]
            input.fill_(word_idx)
            generated.append(word_idx.item())
    print("sample:", " ".join(vocab[i] for i in generated))
    return {"losses": losses, "eval_loss": val_loss, "reloaded_loss": reloaded_loss, "sample": generated,
            "vocab_size": ntokens}


if __name__ == "__main__":
    main()

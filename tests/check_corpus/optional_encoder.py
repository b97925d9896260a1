"""The image-captioning tutorial's style (sgrvinod): validate() takes an encoder that may be
None, and both puts it in eval mode and runs it under the same `if encoder is not None:`
test. Issue 25, 2026-12-04."""

import torch
from models import Decoder, Encoder
from torch import nn


def train(loader, encoder, decoder, criterion, decoder_optimizer, encoder_optimizer):
    decoder.train()
    encoder.train()
    for imgs, caps in loader:
        imgs = encoder(imgs)
        loss = criterion(decoder(imgs, caps), caps)
        decoder_optimizer.zero_grad()
        if encoder_optimizer is not None:
            encoder_optimizer.zero_grad()
        loss.backward()
        decoder_optimizer.step()
        if encoder_optimizer is not None:
            encoder_optimizer.step()


def validate(loader, encoder, decoder, criterion):
    decoder.eval()
    if encoder is not None:
        encoder.eval()
    total = 0.0
    with torch.no_grad():
        for imgs, caps in loader:
            if encoder is not None:
                imgs = encoder(imgs)
            total += criterion(decoder(imgs, caps), caps).item()
    return total / len(loader)


def main(train_loader, val_loader, fine_tune_encoder, epochs):
    torch.manual_seed(0)
    decoder = Decoder()
    decoder_optimizer = torch.optim.Adam(decoder.parameters(), lr=4e-4)
    encoder = Encoder()
    encoder.fine_tune(fine_tune_encoder)
    encoder_optimizer = (
        torch.optim.Adam(encoder.parameters(), lr=1e-4) if fine_tune_encoder else None
    )
    criterion = nn.CrossEntropyLoss()
    for _ in range(epochs):
        train(train_loader, encoder, decoder, criterion, decoder_optimizer, encoder_optimizer)
        print(validate(val_loader, encoder, decoder, criterion))
    print(validate(val_loader, None, decoder, criterion))  # the decoder alone, on features
